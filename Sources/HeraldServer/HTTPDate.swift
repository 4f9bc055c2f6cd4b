import Foundation
import Synchronization

/// The `Date` header's value (RFC 9110's IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`) for the
/// answers written below the router, formatted once a second.
enum HTTPDate {
    private static let cache = Mutex<(second: Int, text: String)>((-1, ""))
    private static let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    static func now() -> String { text(second: time(nil)) }

    static func text(second: Int) -> String {
        cache.withLock { cache in
            if cache.second == second { return cache.text }
            var seconds = time_t(second)
            var parts = tm()
            gmtime_r(&seconds, &parts)
            func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
            let text =
                "\(days[Int(parts.tm_wday) % 7]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon) % 12]) "
                + "\(parts.tm_year + 1900) \(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
            cache = (second, text)
            return text
        }
    }
}
