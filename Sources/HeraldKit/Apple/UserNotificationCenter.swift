// Apple adapter: compiles only where UserNotifications exists; Linux CI does not
// build it. Glue only — every decision is in the core (PermissionFlow, CategoryCatalog,
// LocalTrackScheduler, NotificationEvents), which is tested on Linux with fakes.
#if canImport(UserNotifications)
    public import Foundation
    public import HeraldPayload
    public import UserNotifications

    /// `UNUserNotificationCenter.current()` behind `NotificationCenterPort` (authorization and
    /// categories) and `LocalNotificationScheduler` (local track steps). `payloadKey` is the app's
    /// payload key: local notifications carry their app data under it, as Herald's pushes do.
    public struct UserNotificationCenter: NotificationCenterPort, LocalNotificationScheduler {
        public let payloadKey: String

        public init(payloadKey: String) {
            self.payloadKey = payloadKey
        }

        public func authorizationStatus() async -> AuthorizationStatus {
            AuthorizationStatus(await UNUserNotificationCenter.current().notificationSettings().authorizationStatus)
        }

        public func requestAuthorization(provisional: Bool) async throws -> AuthorizationStatus {
            var options: UNAuthorizationOptions = [.alert, .sound, .badge]
            if provisional { options.insert(.provisional) }
            _ = try await UNUserNotificationCenter.current().requestAuthorization(options: options)
            return await authorizationStatus()
        }

        public func setCategories(_ categories: [CategorySpec]) async {
            UNUserNotificationCenter.current().setNotificationCategories(Set(categories.map(Self.category)))
        }

        public func pendingIdentifiers() async -> [String] {
            await UNUserNotificationCenter.current().pendingNotificationRequests().map(\.identifier)
        }

        public func add(_ request: LocalNotificationRequest) async throws {
            let content = UNMutableNotificationContent()
            content.title = request.title
            content.body = request.body
            content.sound = .default
            content.userInfo = [payloadKey: JSONValue.object(request.appData).anyValue]
            let trigger: UNNotificationTrigger
            switch request.trigger {
            case .calendar(let components):
                trigger = UNCalendarNotificationTrigger(dateMatching: components, repeats: false)
            case .interval(let seconds):
                trigger = UNTimeIntervalNotificationTrigger(timeInterval: max(1, seconds), repeats: false)
            }
            try await UNUserNotificationCenter.current().add(
                UNNotificationRequest(identifier: request.identifier, content: content, trigger: trigger))
        }

        public func remove(identifiers: [String]) async {
            UNUserNotificationCenter.current().removePendingNotificationRequests(withIdentifiers: identifiers)
        }

        /// A category as the notification center takes it.
        public static func category(_ spec: CategorySpec) -> UNNotificationCategory {
            let actions = spec.actions.map { action -> UNNotificationAction in
                var options: UNNotificationActionOptions = []
                if action.authenticationRequired { options.insert(.authenticationRequired) }
                if action.destructive { options.insert(.destructive) }
                if action.textInput {
                    return UNTextInputNotificationAction(identifier: action.id, title: action.title, options: options)
                }
                return UNNotificationAction(identifier: action.id, title: action.title, options: options)
            }
            return UNNotificationCategory(identifier: spec.id, actions: actions, intentIdentifiers: [], options: [])
        }
    }

    extension AuthorizationStatus {
        /// The system's status in Herald's words (`DeviceAttributes.authorizationStatus`).
        public init(_ status: UNAuthorizationStatus) {
            switch status {
            case .notDetermined: self = .notDetermined
            case .denied: self = .denied
            case .authorized: self = .authorized
            case .provisional: self = .provisional
            #if os(iOS)
                case .ephemeral: self = .ephemeral
            #endif
            @unknown default: self = .notDetermined
            }
        }
    }

    /// The notification center's delegate: posts taps, action choices and foreground arrivals to
    /// `NotificationEvents` (buffered until `HeraldClient.attach()`), with the app data under
    /// `payloadKey`. Set it first thing in `application(_:didFinishLaunchingWithOptions:)`. An app
    /// with a delegate of its own calls `HeraldNotificationDelegate.event(for:payloadKey:)` from it instead.
    public final class HeraldNotificationDelegate: NSObject, UNUserNotificationCenterDelegate, Sendable {
        public let payloadKey: String
        public let events: NotificationEvents
        /// How a notification arriving in the foreground is shown.
        public let presentation: UNNotificationPresentationOptions

        public init(
            payloadKey: String, events: NotificationEvents = .shared,
            presentation: UNNotificationPresentationOptions = [.banner, .list, .sound]
        ) {
            self.payloadKey = payloadKey
            self.events = events
            self.presentation = presentation
        }

        /// A response as HeraldKit's event: the default action is `default` (Herald's word), the
        /// dismiss action keeps the system's identifier (`NotificationRouter.dismissAction`).
        public static func event(for response: UNNotificationResponse, payloadKey: String) -> NotificationEvent {
            let appData = JSONValue(any: response.notification.request.content.userInfo[payloadKey])?.objectValue ?? [:]
            let action =
                response.actionIdentifier == UNNotificationDefaultActionIdentifier
                ? "default" : response.actionIdentifier
            return .response(
                appData: appData, action: action, text: (response as? UNTextInputNotificationResponse)?.userText)
        }

        public func userNotificationCenter(
            _ center: UNUserNotificationCenter, didReceive response: UNNotificationResponse,
            withCompletionHandler completionHandler: @escaping () -> Void
        ) {
            events.post(Self.event(for: response, payloadKey: payloadKey))
            completionHandler()
        }

        public func userNotificationCenter(
            _ center: UNUserNotificationCenter, willPresent notification: UNNotification,
            withCompletionHandler completionHandler: @escaping (UNNotificationPresentationOptions) -> Void
        ) {
            events.post(
                .willPresent(
                    appData: JSONValue(any: notification.request.content.userInfo[payloadKey])?.objectValue ?? [:]))
            completionHandler(presentation)
        }
    }
#endif
