public import Foundation
public import HeraldPayload

/// What a background push handler tells the system (UIBackgroundFetchResult without UIKit).
public enum BackgroundFetchOutcome: String, Sendable, Equatable {
    case newData, noData, failed
}

/// Herald's silent sync pushes: `{"cursor": "…"}` under the payload key,
/// sent to a user's other devices when one of them changed data. The handler calls the app's
/// pull-delta closure with the cursor within Apple's 30 s (less a margin, so the app's own
/// completion still fits) and answers the fetch result; a pull that runs out of time is
/// cancelled and answers `failed`.
public struct SilentPushHandler: Sendable {
    public static let cursorKey = "cursor"
    /// Apple gives a background push about 30 s; HeraldKit answers within this.
    public var budget: TimeInterval
    private let clock: any KitClock
    private let pull: @Sendable (_ cursor: String) async throws -> Bool

    /// `pull` fetches what changed since `cursor`; true when something did.
    public init(
        budget: TimeInterval = 25, clock: any KitClock = SystemKitClock(),
        pull: @escaping @Sendable (_ cursor: String) async throws -> Bool
    ) {
        self.budget = budget
        self.clock = clock
        self.pull = pull
    }

    /// Nil when the push is not a Herald sync (the app's other handlers may take it).
    public func handle(appData: [String: JSONValue]) async -> BackgroundFetchOutcome? {
        guard let cursor = appData[Self.cursorKey]?.stringValue else { return nil }
        let pull = pull
        let clock = clock
        let budget = budget
        return await withTaskGroup(of: BackgroundFetchOutcome?.self) { group in
            group.addTask {
                do {
                    return try await pull(cursor) ? .newData : .noData
                } catch {
                    return Task.isCancelled ? nil : .failed
                }
            }
            group.addTask {
                try? await clock.sleep(seconds: budget)
                return nil
            }
            var outcome: BackgroundFetchOutcome = .failed
            if let first = await group.next(), let answered = first { outcome = answered }
            group.cancelAll()
            return outcome
        }
    }
}
