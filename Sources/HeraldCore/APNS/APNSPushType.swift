/// The `apns-push-type` header: an open set of Apple's values (protocols.md §3).
///
/// Unknown values from configuration are kept as they are so that a new Apple push type
/// can be sent before Herald knows it; the simulator answers them with `InvalidPushType`.
public struct APNSPushType: Sendable, Hashable, RawRepresentable, CustomStringConvertible {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    public static let alert = APNSPushType(rawValue: "alert")
    public static let background = APNSPushType(rawValue: "background")
    public static let voip = APNSPushType(rawValue: "voip")
    public static let complication = APNSPushType(rawValue: "complication")
    public static let fileProvider = APNSPushType(rawValue: "fileprovider")
    public static let liveActivity = APNSPushType(rawValue: "liveactivity")
    public static let location = APNSPushType(rawValue: "location")
    public static let mdm = APNSPushType(rawValue: "mdm")
    public static let pushToTalk = APNSPushType(rawValue: "pushtotalk")
    public static let widgets = APNSPushType(rawValue: "widgets")
    public static let controls = APNSPushType(rawValue: "controls")

    /// Every push type Apple documents.
    public static let known: [APNSPushType] = [
        .alert, .background, .voip, .complication, .fileProvider, .liveActivity, .location, .mdm, .pushToTalk,
        .widgets, .controls,
    ]

    /// Push types APNs delivers only to a token registered for them (PushKit, Live Activity,
    /// location pushes …), never to a device's regular alert token.
    public var needsOwnToken: Bool {
        [.voip, .liveActivity, .location, .complication, .fileProvider, .pushToTalk, .widgets, .controls].contains(self)
    }

    /// Whether Apple documents this push type.
    public var isKnown: Bool { Self.known.contains(self) }

    /// The suffix appended to the bundle id to form `apns-topic` (empty for alert and background).
    public var topicSuffix: String {
        switch self {
        case .voip: ".voip"
        case .complication: ".complication"
        case .fileProvider: ".pushkit.fileprovider"
        case .liveActivity: ".push-type.liveactivity"
        case .location: ".location-query"
        case .pushToTalk: ".voip-ptt"
        case .widgets: ".push-type.widgets"
        case .controls: ".push-type.controls"
        default: ""
        }
    }

    /// The largest payload APNs accepts for this push type, in bytes.
    public var payloadLimit: Int { self == .voip ? 5120 : 4096 }

    /// The `apns-topic` for a bundle id and this push type. A bundle id that already carries
    /// the suffix is returned unchanged; MDM topics are used as given.
    public func topic(forBundleID bundleID: String) -> String {
        let suffix = topicSuffix
        if suffix.isEmpty || bundleID.hasSuffix(suffix) { return bundleID }
        return bundleID + suffix
    }

    public var description: String { rawValue }
}

/// The `apns-priority` header: 10 sends now, 5 considers power, 1 never wakes the device.
public struct APNSPriority: Sendable, Hashable, RawRepresentable, CustomStringConvertible {
    public var rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let immediate = APNSPriority(rawValue: 10)
    public static let considerPower = APNSPriority(rawValue: 5)
    public static let prioritizePower = APNSPriority(rawValue: 1)

    /// Whether Apple accepts this value.
    public var isValid: Bool { [1, 5, 10].contains(rawValue) }

    public var description: String { String(rawValue) }
}
