public import Foundation
public import HeraldPayload

/// What the OS says the app may do with notifications.
public enum AuthorizationStatus: String, Sendable, Codable, CaseIterable {
    case notDetermined = "not_determined"
    case denied, authorized, provisional, ephemeral
}

/// What just happened that could lead to asking.
public enum PermissionIntent: Sendable, Equatable {
    /// The app started. By default nothing is asked at launch (users say no to a cold prompt).
    case appLaunched
    /// The user just got value from the app (SyncWell: a sync finished): the time to offer.
    case momentOfValue
    /// The user tapped "turn on notifications" in the app's settings.
    case userAskedToEnable
    /// The app's own explanation screen was shown and accepted / declined.
    case prePermissionAccepted
    case prePermissionDeclined
}

/// What the app should do next.
public enum PermissionStep: Sendable, Equatable {
    case none
    /// Show the app's own explanation first (a "no" there costs nothing; a "no" to the system
    /// prompt is final).
    case showPrePermission
    /// Ask the system: `provisional` asks for quiet delivery without a prompt.
    case requestSystemPrompt(provisional: Bool)
    /// Denied: only Settings can change it; never ask again in-app.
    case openSettings
}

/// The permission flow as a pure function of the status, the intent and what happened
/// before: denied never re-asks; nothing is asked at launch unless the policy says so;
/// provisional and ephemeral are upgraded only when the user shows interest; a declined
/// explanation waits `cooldown` before it is offered again.
public struct PermissionFlow: Sendable {
    public struct Policy: Sendable, Equatable {
        /// Ask for provisional authorization at launch (quiet notifications from the start, no prompt).
        public var provisionalAtLaunch: Bool
        /// Offer the explanation at launch (off by default).
        public var offerAtLaunch: Bool
        /// How long after a declined explanation it may be offered again.
        public var cooldown: TimeInterval
        /// How often the explanation may be declined before it is never offered unasked.
        public var maximumDeclines: Int

        public init(
            provisionalAtLaunch: Bool = false, offerAtLaunch: Bool = false, cooldown: TimeInterval = 7 * 86_400,
            maximumDeclines: Int = 2
        ) {
            self.provisionalAtLaunch = provisionalAtLaunch
            self.offerAtLaunch = offerAtLaunch
            self.cooldown = cooldown
            self.maximumDeclines = maximumDeclines
        }
    }

    /// What the flow remembers (the app keeps it; `Codable`).
    public struct History: Sendable, Codable, Equatable {
        public var declines: Int
        public var lastDeclinedAt: Date?

        public init(declines: Int = 0, lastDeclinedAt: Date? = nil) {
            self.declines = declines
            self.lastDeclinedAt = lastDeclinedAt
        }
    }

    public var policy: Policy

    public init(policy: Policy = Policy()) {
        self.policy = policy
    }

    /// The next step, and the history after it.
    public func next(
        status: AuthorizationStatus, intent: PermissionIntent, history: History = History(), now: Date = Date()
    ) -> (
        step: PermissionStep, history: History
    ) {
        var history = history
        switch (status, intent) {
        case (.authorized, _):
            return (.none, history)
        case (.denied, .userAskedToEnable):
            return (.openSettings, history)
        case (.denied, _):
            return (.none, history)
        case (_, .prePermissionDeclined):
            history.declines += 1
            history.lastDeclinedAt = now
            return (.none, history)
        case (_, .prePermissionAccepted), (_, .userAskedToEnable):
            return (.requestSystemPrompt(provisional: false), history)
        case (.notDetermined, .appLaunched):
            if policy.provisionalAtLaunch { return (.requestSystemPrompt(provisional: true), history) }
            return (policy.offerAtLaunch && mayOffer(history, now: now) ? .showPrePermission : .none, history)
        case (_, .appLaunched):
            // Provisional or ephemeral already: nothing at launch.
            return (.none, history)
        case (_, .momentOfValue):
            return (mayOffer(history, now: now) ? .showPrePermission : .none, history)
        }
    }

    private func mayOffer(_ history: History, now: Date) -> Bool {
        guard history.declines < policy.maximumDeclines else { return false }
        guard let last = history.lastDeclinedAt else { return true }
        return now.timeIntervalSince(last) >= policy.cooldown
    }
}

/// The permission flow run against the notification center: the app says what
/// happened (`intent`), this asks the center for the status, shows the app's explanation when the
/// flow says so (`explain` answers whether the user accepted), asks the system, or opens
/// Settings for a denied user who asked to enable; the flow's history is kept in the store.
public struct PermissionPrompter: Sendable {
    public let flow: PermissionFlow
    public let center: any NotificationCenterPort
    public let settings: (any SettingsOpener)?
    let store: any KeyValueStore
    let clock: any KitClock

    static let storeKey = "herald.permission"

    public init(
        flow: PermissionFlow = PermissionFlow(), center: any NotificationCenterPort,
        settings: (any SettingsOpener)? = nil,
        store: any KeyValueStore, clock: any KitClock = SystemKitClock()
    ) {
        self.flow = flow
        self.center = center
        self.settings = settings
        self.store = store
        self.clock = clock
    }

    /// What the flow remembers (declines), as stored.
    public var history: PermissionFlow.History {
        store.data(forKey: Self.storeKey).flatMap { try? JSONDecoder().decode(PermissionFlow.History.self, from: $0) }
            ?? PermissionFlow.History()
    }

    /// Runs the flow for `intent` to its end; answers the status after (put it in
    /// `DeviceAttributes.authorizationStatus` at the next registration).
    @discardableResult
    public func handle(_ intent: PermissionIntent, explain: @Sendable () async -> Bool = { true }) async
        -> AuthorizationStatus
    {
        var intent = intent
        var status = await center.authorizationStatus()
        // At most: explanation, then the prompt.
        for _ in 0..<3 {
            let (step, history) = flow.next(status: status, intent: intent, history: self.history, now: clock.now)
            store.set(try? JSONEncoder().encode(history), forKey: Self.storeKey)
            switch step {
            case .none:
                return status
            case .showPrePermission:
                intent = await explain() ? .prePermissionAccepted : .prePermissionDeclined
            case .requestSystemPrompt(let provisional):
                return (try? await center.requestAuthorization(provisional: provisional)) ?? status
            case .openSettings:
                await settings?.openNotificationSettings()
                return status
            }
            status = await center.authorizationStatus()
        }
        return status
    }
}

extension HeraldClient {
    /// What an app does at every launch: asks the OS for the device token
    /// (no prompt: tokens come without permission; it arrives at the app delegate), registers
    /// Herald's categories merged with the app's own (the last good copy when offline), and
    /// answers the authorization status for `DeviceAttributes`.
    @discardableResult
    public func launch(
        center: any NotificationCenterPort, registrar: any RemoteNotificationRegistrar,
        ownCategories: [CategorySpec] = []
    ) async -> AuthorizationStatus {
        await registrar.registerForRemoteNotifications()
        let catalog = await categories() ?? CategoryCatalog()
        await center.setCategories(catalog.merged(with: ownCategories))
        return await center.authorizationStatus()
    }
}
