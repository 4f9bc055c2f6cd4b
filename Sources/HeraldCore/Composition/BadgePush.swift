package import Foundation
import HeraldPayload

/// The badge-only push for a new total: `aps.badge` with the absolute total (and `badge` in the
/// data, for FCM devices), no alert, priority 5, one collapse id so only the latest counts. A
/// value, not a callback: the store renders it for the total it computes inside the
/// transaction that changed the counters.
package struct BadgePush: Sendable, Hashable {
    package var payloadKey: String
    /// The providers besides APNs the app sends through.
    package var platforms: PushPlatforms

    package init(payloadKey: String, platforms: PushPlatforms) {
        self.payloadKey = payloadKey
        self.platforms = platforms
    }

    /// The stored content of the push for `total`.
    package func content(total: Int64, now: Date) throws -> Data {
        let badge = Int(clamping: total)
        let draft = NotificationDraft(
            data: .object(["badge": .int(badge)]), priority: 5, collapseID: "herald-badge", badge: badge)
        return try JSONEncoder().encode(
            try NotificationComposer.compose(
                draft, payloadKey: payloadKey, catalog: nil, platforms: platforms, now: now
            ).content)
    }
}
