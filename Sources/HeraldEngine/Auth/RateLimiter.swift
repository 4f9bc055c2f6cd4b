package import Foundation
import Synchronization

/// Token buckets for client-key writes: one per (app, user) and one per client address. A call
/// takes a token from both; an empty bucket answers how many seconds until it holds one again
/// (the 429's `Retry-After`). Full buckets are dropped when the table grows past
/// `maximumEntries`, so a flood of addresses cannot grow memory without bound.
package final class RateLimiter: Sendable {
    static let maximumEntries = 200_000

    private struct Bucket {
        var tokens: Double
        var updated: Date
    }

    private struct Rule {
        var perSecond: Double
        var burst: Double
    }

    private let user: Rule
    private let address: Rule
    private let buckets = Mutex<[String: Bucket]>([:])

    init(_ limits: HeraldConfiguration.RateLimits) {
        user = Rule(perSecond: Double(limits.userPerMinute) / 60, burst: Double(limits.userBurst))
        address = Rule(perSecond: Double(limits.addressPerMinute) / 60, burst: Double(limits.addressBurst))
    }

    /// Takes one token for `userID` of `appID` (when known) and one for `peer`; nil when both
    /// had one, else the whole seconds to wait (nothing is taken then).
    package func take(appID: String, userID: String?, peer: String, now: Date) -> Int? {
        buckets.withLock { buckets in
            if buckets.count > Self.maximumEntries { Self.prune(&buckets, now: now, rules: [user, address]) }
            var keys: [(String, Rule)] = [("a\u{0}" + peer, address)]
            if let userID { keys.append(("u\u{0}" + appID + "\u{0}" + userID, user)) }
            var refilled: [(String, Bucket)] = []
            var wait = 0.0
            for (key, rule) in keys {
                var bucket = buckets[key] ?? Bucket(tokens: rule.burst, updated: now)
                let elapsed = max(0, now.timeIntervalSince(bucket.updated))
                bucket.tokens = min(rule.burst, bucket.tokens + elapsed * rule.perSecond)
                bucket.updated = now
                if bucket.tokens < 1 { wait = max(wait, (1 - bucket.tokens) / rule.perSecond) }
                refilled.append((key, bucket))
            }
            if wait > 0 {
                for (key, bucket) in refilled { buckets[key] = bucket }
                return Int(min(wait, 3600).rounded(.up))
            }
            for (key, var bucket) in refilled {
                bucket.tokens -= 1
                buckets[key] = bucket
            }
            return nil
        }
    }

    /// Drops the buckets that have refilled (they are the same as none); all of them when that
    /// is not enough.
    private static func prune(_ buckets: inout [String: Bucket], now: Date, rules: [Rule]) {
        let slowest = rules.map(\.perSecond).min() ?? 1
        let largest = rules.map(\.burst).max() ?? 1
        buckets = buckets.filter { now.timeIntervalSince($0.value.updated) * slowest < largest }
        if buckets.count > maximumEntries / 2 { buckets.removeAll() }
    }
}
