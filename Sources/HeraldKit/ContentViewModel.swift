import Foundation
public import HeraldPayload

/// What the notification content extension shows, computed without UIKit
/// from the notification's text and app data; the Apple adapter only lays it out.
public struct NotificationCardModel: Sendable, Equatable {
    /// One line, at most 50 characters.
    public var title: String
    /// The banner's excerpt: at most 90 characters, an ellipsis at a character boundary.
    public var bannerBody: String
    /// The whole body, for the expanded view.
    public var fullBody: String
    /// The chip row: the specialist and the confidence (`0.82`), when the data has them.
    public var chips: [String]
    public var stakes: Stakes
    /// "Low", "Medium", "High", "Needs attention".
    public var stakesLabel: String
    /// The stripe's colour name: `neutral` (low: no stripe), `amber` (medium, failure), `rose` (high).
    public var stakesColor: String
    /// The "Why:" line of the expanded view, when the data has a reason.
    public var why: String?
    /// VoiceOver's reading order: stakes, title, chips, body, why.
    public var accessibilityElements: [String]
    /// Whether the stakes' emphasis may animate (off when the user asked for reduced motion).
    public var animatesEmphasis: Bool

    public static let titleLimit = 50
    public static let bannerLimit = 90

    /// `appData` may carry `specialist`, `confidence` (0…1) and `reason` (Cocotte's data).
    public init(title: String, body: String, appData: [String: JSONValue], stakes: Stakes, reduceMotion: Bool) {
        self.title = Self.truncated(title.replacingOccurrences(of: "\n", with: " "), to: Self.titleLimit)
        bannerBody = Self.truncated(body, to: Self.bannerLimit)
        fullBody = body
        var chips: [String] = []
        if let specialist = appData["specialist"]?.stringValue, !specialist.isEmpty { chips.append(specialist) }
        if let confidence = Self.confidence(appData["confidence"]) {
            chips.append(String(format: "conf %.2f", confidence))
        }
        self.chips = chips
        self.stakes = stakes
        switch stakes {
        case .low: (stakesLabel, stakesColor) = ("Low", "neutral")
        case .medium: (stakesLabel, stakesColor) = ("Medium", "amber")
        case .high: (stakesLabel, stakesColor) = ("High", "rose")
        case .failure: (stakesLabel, stakesColor) = ("Needs attention", "amber")
        }
        why = appData["reason"]?.stringValue.flatMap { $0.isEmpty ? nil : "Why: \($0)" }
        accessibilityElements = ["\(stakesLabel) stakes", self.title] + chips + [body] + (why.map { [$0] } ?? [])
        animatesEmphasis = !reduceMotion && stakes >= .high
    }

    /// `text` cut to at most `limit` characters (grapheme clusters: an emoji or an accented
    /// letter is never split) with an ellipsis when cut.
    public static func truncated(_ text: String, to limit: Int) -> String {
        guard text.count > limit else { return text }
        var cut = String(text.prefix(limit - 1))
        while let last = cut.last, last.isWhitespace { cut.removeLast() }
        return cut + "…"
    }

    /// A confidence in 0…1 from a number or a string ("0.82"); nil otherwise.
    static func confidence(_ value: JSONValue?) -> Double? {
        let number: Double?
        switch value {
        case .double(let double)?: number = double
        case .int(let int)?: number = Double(int)
        case .string(let text)?: number = Double(text)
        default: number = nil
        }
        guard let number, (0...1).contains(number) else { return nil }
        return number
    }
}
