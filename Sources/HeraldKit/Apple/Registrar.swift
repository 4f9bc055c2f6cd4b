// Apple adapters: compile only where UIKit / AppKit exist; Linux CI does not build
// them. Glue only: what to do and when is in the core (`HeraldClient.launch`, `PermissionPrompter`).
#if canImport(UIKit) && !os(watchOS)
    public import UIKit

    /// `UIApplication` as the APNs registrar and the way to the app's notification settings.
    public struct ApplicationRegistrar: RemoteNotificationRegistrar, SettingsOpener {
        public init() {}

        @MainActor public func registerForRemoteNotifications() {
            UIApplication.shared.registerForRemoteNotifications()
        }

        @MainActor public func openNotificationSettings() {
            var name = UIApplication.openSettingsURLString
            #if os(iOS)
                if #available(iOS 15.4, *) { name = UIApplication.openNotificationSettingsURLString }
            #endif
            if let url = URL(string: name) { UIApplication.shared.open(url) }
        }
    }
#elseif canImport(AppKit)
    public import AppKit

    /// `NSApplication` as the APNs registrar and the way to the system's notification settings.
    public struct ApplicationRegistrar: RemoteNotificationRegistrar, SettingsOpener {
        public init() {}

        @MainActor public func registerForRemoteNotifications() {
            NSApplication.shared.registerForRemoteNotifications()
        }

        @MainActor public func openNotificationSettings() {
            if let url = URL(string: "x-apple.systempreferences:com.apple.preference.notifications") {
                NSWorkspace.shared.open(url)
            }
        }
    }
#endif
