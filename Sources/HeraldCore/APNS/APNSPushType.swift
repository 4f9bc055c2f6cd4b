/// The `apns-push-type` header: an open set of Apple's values (protocols.md §3).
///
/// Unknown values from configuration are kept as they are so that a new Apple push type
/// can be sent before Herald knows it; the simulator answers them with `InvalidPushType`.
package struct APNSPushType: Sendable, Hashable, RawRepresentable, CustomStringConvertible {
    package var rawValue: String
    package init(rawValue: String) { self.rawValue = rawValue }

    package static let alert = APNSPushType(rawValue: "alert")
    package static let background = APNSPushType(rawValue: "background")
    package static let voip = APNSPushType(rawValue: "voip")
    package static let complication = APNSPushType(rawValue: "complication")
    package static let fileProvider = APNSPushType(rawValue: "fileprovider")
    package static let liveActivity = APNSPushType(rawValue: "liveactivity")
    package static let location = APNSPushType(rawValue: "location")
    package static let mdm = APNSPushType(rawValue: "mdm")
    package static let pushToTalk = APNSPushType(rawValue: "pushtotalk")
    package static let widgets = APNSPushType(rawValue: "widgets")
    package static let controls = APNSPushType(rawValue: "controls")

    /// Every push type Apple documents.
    package static let known: [APNSPushType] = [
        .alert, .background, .voip, .complication, .fileProvider, .liveActivity, .location, .mdm, .pushToTalk,
        .widgets, .controls,
    ]

    /// Push types APNs delivers only to a token registered for them (PushKit, Live Activity,
    /// location pushes …), never to a device's regular alert token.
    package var needsOwnToken: Bool {
        [.voip, .liveActivity, .location, .complication, .fileProvider, .pushToTalk, .widgets, .controls].contains(self)
    }

    /// Whether Apple documents this push type.
    package var isKnown: Bool { Self.known.contains(self) }

    /// The suffix appended to the bundle id to form `apns-topic` (empty for alert and background).
    package var topicSuffix: String {
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
    package var payloadLimit: Int { self == .voip ? 5120 : 4096 }

    /// The `apns-topic` for a bundle id and this push type. A bundle id that already carries
    /// the suffix is returned unchanged; MDM topics are used as given.
    package func topic(forBundleID bundleID: String) -> String {
        let suffix = topicSuffix
        if suffix.isEmpty || bundleID.hasSuffix(suffix) { return bundleID }
        return bundleID + suffix
    }

    package var description: String { rawValue }
}

/// The `apns-priority` header: 10 sends now, 5 considers power, 1 never wakes the device.
package struct APNSPriority: Sendable, Hashable, RawRepresentable, CustomStringConvertible {
    package var rawValue: Int
    package init(rawValue: Int) { self.rawValue = rawValue }

    package static let immediate = APNSPriority(rawValue: 10)
    package static let considerPower = APNSPriority(rawValue: 5)
    package static let prioritizePower = APNSPriority(rawValue: 1)

    /// Whether Apple accepts this value.
    package var isValid: Bool { [1, 5, 10].contains(rawValue) }

    package var description: String { String(rawValue) }
}
