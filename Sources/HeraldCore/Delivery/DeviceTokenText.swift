/// How Herald shows a device token anywhere it shows one (pages, previews, logs): its first 8
/// characters, never more.
package enum DeviceTokenText {
    package static func redacted(_ token: String) -> String { String(token.prefix(8)) + "…" }
}
