public import Foundation
public import HeraldPayload

/// How an app reaches Herald.
public struct HeraldKitConfiguration: Sendable {
    /// The app's id in Herald (`apps[].id`).
    public var appID: String
    /// The app's client key (`apps[].keys.client`): it registers devices and reports opens; it
    /// cannot send.
    public var clientKey: String
    /// `apns` or `fcm`.
    public var platform: String
    public var environment: PushEnvironment
    /// A registration is sent again after this long even if nothing changed (the server then
    /// knows the device is alive; a week by default).
    public var heartbeat: TimeInterval
    /// The user token for `userID` (`X-Herald-User-Token`), which the app's backend signs with
    /// the app's `user_token_secret`; asked for when a request is sent. Nil: none is sent
    /// (an app Herald runs with `client_registration: unverified`).
    public var userToken: @Sendable (_ userID: String) async throws -> String?

    public init(
        appID: String, clientKey: String, platform: String = "apns", environment: PushEnvironment = .fromBuild,
        heartbeat: TimeInterval = 7 * 86_400,
        userToken: @escaping @Sendable (_ userID: String) async throws -> String? = { _ in nil }
    ) {
        self.appID = appID
        self.clientKey = clientKey
        self.platform = platform
        self.environment = environment
        self.heartbeat = heartbeat
        self.userToken = userToken
    }
}

/// What Herald is told about the device besides its token.
public struct DeviceAttributes: Sendable, Codable, Hashable {
    public var name: String?
    public var model: String?
    public var locale: String?
    public var timeZone: String?
    public var appVersion: String?
    /// `not_determined`, `denied`, `authorized`, `provisional` or `ephemeral` (`AuthorizationStatus`).
    public var authorizationStatus: String?

    public init(
        name: String? = nil, model: String? = nil, locale: String? = nil, timeZone: String? = nil,
        appVersion: String? = nil,
        authorizationStatus: String? = nil
    ) {
        self.name = name
        self.model = model
        self.locale = locale
        self.timeZone = timeZone
        self.appVersion = appVersion
        self.authorizationStatus = authorizationStatus
    }
}

/// HeraldKit's entry point in an app: the device's registration (tokens), the opens
/// it reports, all through a persistent outbox. One per app process.
public actor HeraldClient {
    public let configuration: HeraldKitConfiguration
    public let outbox: Outbox
    /// Where HeraldKit keeps what must survive a relaunch.
    let store: any KeyValueStore
    /// What reaches Herald (the outbox's, and direct reads such as the categories).
    let transport: any HTTPTransport
    private let clock: any KitClock
    let logger: any KitLogger
    private var registration: Registration

    /// What this device told Herald, kept across launches.
    struct Registration: Codable, Equatable {
        /// The device's id in Herald: made once per install.
        var deviceID: String
        /// The user signed in, and the last token the OS gave.
        var userID: String?
        var token: String?
        var attributes: DeviceAttributes?
        /// What Herald acknowledged last (token, user, attributes) and when.
        var acknowledged: Acknowledged?
        /// Delivery ids whose open was reported (the newest `openedMemory`).
        var opened: [Int64] = []
        /// Delivery ids whose receipt was reported (the newest `openedMemory`). Optional: a
        /// registration stored by an earlier version decodes.
        var received: [Int64]?
        /// Devices this install registered under an earlier device id (the app now passes
        /// another one): removed from Herald before the next registration or at sign-out, so an
        /// old token does not go on receiving this user's notifications. Optional: a registration
        /// stored by an earlier version decodes.
        var retired: [RetiredDevice]?
        /// Live Activity tokens Herald acknowledged, by `ActivityTokenKey` (push-to-start per
        /// attributes type, update per activity). Optional: a registration stored by an
        /// earlier version decodes.
        var activityTokens: [String: String]?
    }

    struct RetiredDevice: Codable, Equatable {
        var deviceID: String
        var userID: String
    }

    struct Acknowledged: Codable, Equatable {
        var token: String
        var userID: String
        var attributes: DeviceAttributes
        var environment: PushEnvironment
        var at: Date
    }

    static let storeKey = "herald.registration"
    static let openedMemory = 500

    /// `backgroundUploader` sends quick-action commits (a background `URLSession` on Apple
    /// platforms); without one they go through `transport`. `deviceID`: the app's own id for
    /// this install, if it has one (else HeraldKit makes one and keeps it); when it differs from
    /// the one stored, the device registered under the old id is removed from Herald.
    public init(
        configuration: HeraldKitConfiguration, transport: any HTTPTransport,
        backgroundUploader: (any BackgroundUploader)? = nil,
        store: any KeyValueStore, clock: any KitClock = SystemKitClock(), logger: any KitLogger = SilentKitLogger(),
        deviceID: String? = nil
    ) {
        self.configuration = configuration
        self.store = store
        self.transport = transport
        self.clock = clock
        self.logger = logger
        var registration =
            store.data(forKey: Self.storeKey).flatMap { try? JSONDecoder().decode(Registration.self, from: $0) }
            ?? Registration(deviceID: deviceID ?? UUID().uuidString.lowercased())
        if let deviceID, deviceID != registration.deviceID {
            var retired = registration.retired ?? []
            if let userID = registration.userID {
                retired.append(RetiredDevice(deviceID: registration.deviceID, userID: userID))
            }
            registration = Registration(deviceID: deviceID)
            registration.retired = retired.isEmpty ? nil : retired
        }
        self.registration = registration
        let key = configuration.clientKey
        let userToken = configuration.userToken
        outbox = Outbox(transport: transport, uploader: backgroundUploader, store: store, clock: clock, logger: logger)
        { request, userID in
            var request = request
            request.headers["Authorization"] = "Bearer \(key)"
            if let userID, let token = try await userToken(userID) { request.headers["X-Herald-User-Token"] = token }
            return request
        }
    }

    /// The device's id in Herald.
    public var deviceID: String { registration.deviceID }
    /// The user whose device this is now (nil when signed out).
    public var userID: String? { registration.userID }
    /// The token Herald acknowledged last (nil: none yet, or signed out).
    public var acknowledgedToken: String? { registration.acknowledged?.token }

    // MARK: Tokens

    /// The OS gave a device token (each launch calls `registerForRemoteNotifications`): hex-
    /// encoded and sent to Herald for `userID` when it differs from what Herald has, the user or
    /// the attributes changed, or the heartbeat is due; otherwise nothing is sent. Returns the hex.
    @discardableResult
    public func register(rawToken: Data, userID: String, attributes: DeviceAttributes = DeviceAttributes()) async
        -> String
    {
        let token = DeviceToken.hex(rawToken)
        registration.userID = userID
        registration.token = token
        registration.attributes = attributes
        save()
        let now = clock.now
        if let acknowledged = registration.acknowledged, acknowledged.token == token, acknowledged.userID == userID,
            acknowledged.attributes == attributes, acknowledged.environment == configuration.environment,
            now.timeIntervalSince(acknowledged.at) < configuration.heartbeat
        {
            return token
        }
        await removeRetired()
        await enqueueRegistration(token: token, userID: userID, attributes: attributes)
        await outbox.drain()
        return token
    }

    /// Registering with the OS failed: logged; the server's token is left as it is (a
    /// transient failure must not unregister a device that still receives).
    public func registrationFailed(_ error: any Error) {
        logger.log(.warning, "HeraldKit: the OS could not register for remote notifications: \(error)")
    }

    /// The user signed out: Herald forgets this device (its token no longer receives this
    /// user's notifications), and any this install registered under an earlier device id, in
    /// order after anything still waiting; a registration still waiting is replaced by the
    /// removal, and a device Herald no longer has counts as removed.
    public func signOut() async {
        await removeRetired()
        guard let userID = registration.userID else {
            await outbox.drain()
            return
        }
        await enqueueRemoval(deviceID: registration.deviceID, userID: userID)
        registration.userID = nil
        registration.acknowledged = nil
        registration.opened = []
        registration.activityTokens = nil
        save()
        await outbox.drain()
    }

    /// Queues the removal of a device (one Herald no longer has counts as removed).
    private func enqueueRemoval(deviceID: String, userID: String) async {
        await outbox.enqueue(
            kind: "unregister",
            request: HTTPRequestSpec(method: "DELETE", path: path("devices/\(Self.escaped(deviceID))")), userID: userID,
            coalesceKey: "device:\(deviceID)", notFoundIsDone: true)
    }

    /// Queues the removal of the devices registered under earlier device ids (the outbox keeps
    /// them from here on).
    private func removeRetired() async {
        guard let retired = registration.retired else { return }
        for device in retired {
            await enqueueRemoval(deviceID: device.deviceID, userID: device.userID)
            logger.log(
                .info,
                "HeraldKit: device \(device.deviceID), registered under an earlier device id, is removed from Herald")
        }
        registration.retired = nil
        save()
    }

    private func enqueueRegistration(token: String, userID: String, attributes: DeviceAttributes) async {
        var body: [String: String] = [
            "device_id": registration.deviceID, "user_id": userID, "platform": configuration.platform, "token": token,
            "environment": configuration.environment.rawValue,
        ]
        body["name"] = attributes.name
        body["model"] = attributes.model
        body["locale"] = attributes.locale
        body["time_zone"] = attributes.timeZone
        body["app_version"] = attributes.appVersion
        body["authorization_status"] = attributes.authorizationStatus
        let acknowledged = Acknowledged(
            token: token, userID: userID, attributes: attributes, environment: configuration.environment, at: clock.now)
        let request = HTTPRequestSpec(
            method: "POST", path: path("devices"), headers: ["Content-Type": "application/json"], body: Self.json(body))
        await outbox.enqueue(
            kind: "register", request: request, userID: userID, coalesceKey: "device:\(registration.deviceID)"
        ) { [weak self] outcome in
            guard case .delivered = outcome else { return }
            await self?.acknowledge(acknowledged)
        }
        logger.log(.info, "HeraldKit: registration of \(DeviceToken.redacted(token)) for \(userID) queued")
    }

    private func acknowledge(_ acknowledged: Acknowledged) {
        // A sign-out or another user since: that registration is no longer what Herald has.
        guard registration.userID == acknowledged.userID else { return }
        registration.acknowledged = acknowledged
        save()
    }

    // MARK: Live Activities

    /// ActivityKit gave a push-to-start token for an `ActivityAttributes` type
    /// (`Activity<T>.pushToStartTokenUpdates`): reported to Herald for this device, once per
    /// token (ActivityKit hands the same one again; a new one replaces it). Returns the hex, or
    /// nil while no user is signed in (nothing is sent: the device is not registered).
    @discardableResult
    public func reportPushToStartToken(_ rawToken: Data, attributesType: String) async -> String? {
        let path = path(
            "devices/\(Self.escaped(registration.deviceID))/activity-tokens/start/\(Self.escaped(attributesType))")
        return await reportActivityToken(rawToken, key: "start:\(attributesType)", path: path, fields: [:])
    }

    /// An activity's update token (`activity.pushTokenUpdates`, which keeps streaming: APNs
    /// rotates it during the activity): reported once per token; a rotation replaces the report
    /// still waiting. `activityID` is the id the app's backend uses for the activity (Herald's
    /// `activity_id`); `attributesType` names its `ActivityAttributes` for an activity the app
    /// started itself. Returns the hex, or nil while no user is signed in.
    @discardableResult
    public func reportActivityToken(_ rawToken: Data, activityID: String, attributesType: String? = nil) async
        -> String?
    {
        let path = path(
            "activities/\(Self.escaped(activityID))/tokens/\(Self.escaped(registration.deviceID))")
        var fields: [String: String] = [:]
        fields["attributes_type"] = attributesType
        return await reportActivityToken(rawToken, key: "activity:\(activityID)", path: path, fields: fields)
    }

    /// Queues `PUT path {"token", fields}` unless Herald acknowledged this token for `key`
    /// already; a report of `key` still waiting is replaced.
    private func reportActivityToken(_ rawToken: Data, key: String, path: String, fields: [String: String]) async
        -> String?
    {
        let token = DeviceToken.hex(rawToken)
        guard let userID = registration.userID else {
            logger.log(.warning, "HeraldKit: a Live Activity token came while no user is signed in: not reported")
            return nil
        }
        if registration.activityTokens?[key] == token { return token }
        var body = fields
        body["token"] = token
        await outbox.enqueue(
            kind: "activity-token",
            request: HTTPRequestSpec(
                method: "PUT", path: path, headers: ["Content-Type": "application/json"], body: Self.json(body)),
            userID: userID, coalesceKey: key, retryNotFound: true
        ) { [weak self] outcome in
            guard case .delivered = outcome else { return }
            await self?.acknowledgeActivityToken(token, key: key)
        }
        logger.log(.info, "HeraldKit: Live Activity token \(DeviceToken.redacted(token)) (\(key)) queued")
        await outbox.drain()
        return token
    }

    private func acknowledgeActivityToken(_ token: String, key: String) {
        var tokens = registration.activityTokens ?? [:]
        tokens[key] = token
        // An install's activities come and go: the newest 200 are kept.
        if tokens.count > 200, let oldest = tokens.keys.first(where: { $0.hasPrefix("activity:") && $0 != key }) {
            tokens[oldest] = nil
        }
        registration.activityTokens = tokens
        save()
    }

    // MARK: Opens

    /// The user opened a delivered notification (tapped it: `action` "default", or chose one
    /// of its actions): reported to Herald once per delivery, however often this is called
    /// (apps see the same response twice on a cold start). `appData` is the object under the
    /// app's payload key (or FCM's data). Returns false when the payload has no Herald stamp.
    @discardableResult
    public func reportOpened(appData: [String: JSONValue], action: String = "default") async -> Bool {
        guard let stamp = HeraldStamp(appData: appData) else { return false }
        guard Self.remember(stamp.deliveryID, in: &registration.opened) else { return true }
        await report("opened", stamp, ["action": .string(action)], background: false)
        return true
    }

    /// Reports that the delivery whose payload carries `appData` reached this device (confirmed
    /// delivery), once per delivery: from the notification service extension
    /// (`ServiceExtensionSession`'s `reportReceipt`) or as it arrives in the foreground. The
    /// receipt is stored in the outbox first and sent by the background uploader when there is
    /// one, so an offline device sends it when the network returns. Returns false for a payload
    /// without Herald's stamp.
    @discardableResult
    public func reportReceived(appData: [String: JSONValue], displayed: Bool = true) async -> Bool {
        guard let stamp = HeraldStamp(appData: appData) else { return false }
        var received = registration.received ?? []
        guard Self.remember(stamp.deliveryID, in: &received) else { return true }
        registration.received = received
        await report("received", stamp, ["displayed": .bool(displayed)], background: true)
        return true
    }

    /// Adds `delivery` to `list` (the newest `openedMemory` kept); false when it was there.
    private static func remember(_ delivery: Int64, in list: inout [Int64]) -> Bool {
        guard !list.contains(delivery) else { return false }
        list.append(delivery)
        if list.count > openedMemory { list.removeFirst(list.count - openedMemory) }
        return true
    }

    /// Saves what was remembered, then queues `POST …/<kind>` about the stamp's delivery from
    /// this device (with `fields` and the time now) in the outbox and sends what is due.
    private func report(_ kind: String, _ stamp: HeraldStamp, _ fields: [String: JSONValue], background: Bool) async {
        save()
        var body = fields
        body["delivery_id"] = .int(Int(stamp.deliveryID))
        body["device_id"] = .string(registration.deviceID)
        body["at"] = .string(clock.now.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true)))
        await outbox.enqueue(
            kind: kind,
            request: HTTPRequestSpec(
                method: "POST", path: path(kind), headers: ["Content-Type": "application/json"],
                body: try? JSONEncoder().encode(JSONValue.object(body))),
            userID: registration.userID, retryNotFound: true, background: background)
        await outbox.drain()
    }

    // MARK: Helpers

    private func path(_ tail: String) -> String { "/v1/apps/\(Self.escaped(configuration.appID))/\(tail)" }

    static func escaped(_ component: String) -> String {
        component.addingPercentEncoding(
            withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/"))) ?? component
    }

    static func json(_ object: [String: String]) -> Data {
        (try? JSONEncoder().encode(object)) ?? Data()
    }

    private func save() {
        store.set(try? JSONEncoder().encode(registration), forKey: Self.storeKey)
    }
}
