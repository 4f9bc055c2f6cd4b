package import Foundation
import Synchronization

/// Slows down key guessing at the dashboard's sign-in: per client address, the first
/// `freeFailures` failures cost nothing, then each waits twice as long as the last (1 s, 2 s, 4 s
/// … up to `longestWait`); across all addresses, more than `globalFailures` failures in a minute
/// hold every sign-in for the rest of that minute. A success clears its address. Entries idle for
/// an hour are forgotten, and the table holds at most `maximumAddresses`.
package final class SignInThrottle: Sendable {
    static let freeFailures = 5
    static let longestWait: TimeInterval = 900
    static let globalFailures = 100
    static let maximumAddresses = 100_000

    private struct Peer {
        var failures: Int
        var blockedUntil: Date
        var lastFailure: Date
    }

    private struct State {
        var peers: [String: Peer] = [:]
        var windowStart = Date.distantPast
        var windowFailures = 0
    }

    private let state = Mutex(State())

    /// Seconds `peer` must wait before trying again, or nil when it may try now.
    package func wait(peer: String, now: Date) -> Int? {
        state.withLock { state in
            var until = state.peers[peer]?.blockedUntil ?? .distantPast
            if state.windowFailures > Self.globalFailures, now.timeIntervalSince(state.windowStart) < 60 {
                until = max(until, state.windowStart.addingTimeInterval(60))
            }
            let seconds = until.timeIntervalSince(now)
            return seconds > 0 ? Int(min(seconds, Self.longestWait).rounded(.up)) : nil
        }
    }

    /// Counts a failed sign-in from `peer`.
    package func failed(peer: String, now: Date) {
        state.withLock { state in
            if now.timeIntervalSince(state.windowStart) >= 60 {
                state.windowStart = now
                state.windowFailures = 0
            }
            state.windowFailures += 1
            if state.peers[peer] == nil, state.peers.count >= Self.maximumAddresses {
                state.peers = state.peers.filter { now.timeIntervalSince($0.value.lastFailure) < 3600 }
                if state.peers.count >= Self.maximumAddresses { state.peers.removeAll() }
            }
            var entry = state.peers[peer] ?? Peer(failures: 0, blockedUntil: .distantPast, lastFailure: now)
            if now.timeIntervalSince(entry.lastFailure) >= 3600 { entry.failures = 0 }
            entry.failures += 1
            entry.lastFailure = now
            if entry.failures > Self.freeFailures {
                let exponent = Double(min(entry.failures - Self.freeFailures - 1, 20))
                entry.blockedUntil = now.addingTimeInterval(min(Self.longestWait, pow(2, exponent)))
            }
            state.peers[peer] = entry
        }
    }

    /// A successful sign-in from `peer` clears its failures.
    package func succeeded(peer: String) {
        _ = state.withLock { $0.peers.removeValue(forKey: peer) }
    }
}
