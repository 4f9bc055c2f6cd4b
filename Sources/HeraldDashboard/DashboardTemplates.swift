import HeraldEngine

// The dashboard's templates and assets are files in Resources/dashboard, compiled into the
// binary: nothing is read from disk or a CDN, so the dashboard works offline. Mustache escapes
// every {{value}}; the only unescaped one, {{{content}}}, is a page this code rendered.

enum DashboardTemplates {
    /// The pages' templates by name. Rows link with the page's `app`: a name a row lacks is
    /// looked up in the enclosing sections.
    static let all: [String: String] = [
        "layout": text(PackageResources.layout_mustache), "login": text(PackageResources.login_mustache),
        "overview": text(PackageResources.overview_mustache), "users": text(PackageResources.users_mustache),
        "notifications": text(PackageResources.notifications_mustache),
        "notification": text(PackageResources.notification_mustache),
        "message": text(PackageResources.message_mustache), "compose": text(PackageResources.compose_mustache),
        "analytics": text(PackageResources.analytics_mustache), "catalog": text(PackageResources.catalog_mustache),
    ]

    static let css = text(PackageResources.dashboard_css)

    /// Progressive: the pages work without it. It refreshes a notification's counts and delivery
    /// states every 2 s while any is still waiting.
    static let script = text(PackageResources.dashboard_js)

    /// A resource file's text, without the file's final newline.
    private static func text(_ bytes: [UInt8]) -> String {
        let text = String(decoding: bytes, as: UTF8.self)
        return text.hasSuffix("\n") ? String(text.dropLast()) : text
    }
}
