/// How much is at stake in a notification: drives vacation mode and Do-Not-Disturb bypass
/// on the server, and on the device the card's stripe and whether a tap opens behind
/// authentication. The catalog's `stakes:` and `GET …/catalog/categories`' `types[].stakes`.
public enum Stakes: String, Sendable, Hashable, Codable, CaseIterable, Comparable {
    case low, medium, high, failure

    private var rank: Int { Self.allCases.firstIndex(of: self)! }
    public static func < (lhs: Stakes, rhs: Stakes) -> Bool { lhs.rank < rhs.rank }
}
