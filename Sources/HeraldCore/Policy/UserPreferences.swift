import Foundation
import HeraldPayload

/// A user's notification preferences as the API and the store keep them: per-type switches,
/// quiet hours, vacation and the stakes that break through Do-Not-Disturb.
package struct UserPreferences: Codable, Sendable, Hashable {
    package struct QuietHoursSetting: Codable, Sendable, Hashable {
        package var enabled: Bool
        package var start: String?
        package var end: String?
    }

    /// Per-type on/off by type name or external id; missing types use the catalog default.
    package var types: [String: Bool]?
    package var quietHours: QuietHoursSetting?
    package var vacation: Bool?
    /// Stakes levels allowed to break through Do-Not-Disturb: `{"high": true, "failure": true}`.
    package var dndBypass: [String: Bool]?

    package init(
        types: [String: Bool]? = nil, quietHours: QuietHoursSetting? = nil, vacation: Bool? = nil,
        dndBypass: [String: Bool]? = nil
    ) {
        self.types = types
        self.quietHours = quietHours
        self.vacation = vacation
        self.dndBypass = dndBypass
    }

    enum CodingKeys: String, CodingKey {
        case types, vacation
        case quietHours = "quiet_hours"
        case dndBypass = "dnd_bypass"
    }

    /// What the API shows: every user-controllable type of the catalog with its effective
    /// setting (the user's choice, else the catalog default), keyed by type name.
    package func withDefaults(from catalog: Catalog?) -> UserPreferences {
        guard let catalog else { return self }
        var copy = self
        var effective: [String: Bool] = [:]
        for type in catalog.types where type.userControllable {
            let chosen = (types ?? [:]).first { catalog.type($0.key)?.name == type.name }?.value
            effective[type.name] = chosen ?? type.defaultEnabled
        }
        copy.types = effective
        return copy
    }

    /// The policy engine's view of a user with these preferences; `defaultQuietHours` is the
    /// app's window, used when the user turned quiet hours on without their own.
    package func policyUser(timeZone: String?, defaultQuietHours: QuietHours?) -> PolicyUser {
        var quiet: QuietHours?
        if let setting = quietHours, setting.enabled {
            if let start = setting.start.flatMap(LocalTime.init), let end = setting.end.flatMap(LocalTime.init) {
                quiet = QuietHours(start: start, end: end)
            } else {
                quiet = defaultQuietHours
            }
        } else if quietHours == nil {
            quiet = defaultQuietHours
        }
        return PolicyUser(
            timeZone: timeZone.flatMap(TimeZone.init(identifier:)) ?? TimeZone(identifier: "UTC")!,
            typeEnabled: types ?? [:], quietHours: quiet, vacation: vacation ?? false,
            dndBypass: Set((dndBypass ?? [:]).filter(\.value).compactMap { Stakes(rawValue: $0.key) }))
    }
}
