package import Foundation
import HeraldStore

/// How the outbox loop works (YAML `outbox.*`); every default is documented here and in the
/// README's configuration table.
package struct DispatcherConfiguration: Sendable {
    /// Deliveries claimed per batch. Default 5,000.
    package var batchSize: Int
    /// How long to sleep when nothing is due (the API wakes it sooner). Default 200 ms.
    package var idleInterval: Duration
    /// Deliveries sent and not yet answered, across batches: a slow token holds one place here,
    /// never a whole batch. Default 10,000 (two batches).
    package var maximumInFlight: Int
    /// The longest an answer waits to be written when fewer than `DeliveryRecorder.writeAt`
    /// wait (bounded groups). Default 50 ms.
    package var recordInterval: Duration
    /// Seconds after which a batch's unanswered deliveries are queued again (the attempt counts)
    /// and late answers are ignored. Default 120 (the clients' 60 s retry deadline, twice).
    package var batchDeadline: TimeInterval
    /// Seconds graceful shutdown waits for deliveries in flight before handing them back to the
    /// queue and closing the provider connections. Default 20, so the whole stop fits in 30 s.
    package var shutdownGrace: TimeInterval
    /// Attempts (requests sent, answered or not) after which a delivery that keeps failing
    /// temporarily fails for good. Default 20.
    package var maximumAttempts: Int
    /// First outbox retry delay in seconds, doubling per attempt. Default 5.
    package var retryBaseDelay: TimeInterval
    /// Longest outbox retry delay in seconds. Default 300.
    package var retryMaximumDelay: TimeInterval
    /// Seconds after which a delivery still not sent ends `failed` `Expired` (as does one past
    /// its notification's `expiration`). Default 86,400 (a day).
    package var maximumAge: TimeInterval
    /// Seconds answered deliveries (with their traces), notifications without deliveries left
    /// (with their idempotency keys) and pacing records are kept. Default 604,800 (7 days).
    package var retention: TimeInterval
    /// How often the retention clean-up runs. Default 60 s.
    package var retentionInterval: Duration
    /// PostgreSQL: result writes that may run at once. Each answer waits for less (a crash
    /// resends fewer), at the cost of more, smaller writes. SQLite has one writer. Default 1.
    package var resultWrites = 1
    /// Where providers' answers are journaled until written (`AnswerJournal`), so the next start
    /// writes those a crash left unwritten instead of sending them again. Default: beside a
    /// SQLite file (`FILE-answers`); on PostgreSQL `answers` in the state directory systemd gives
    /// the service (`STATE_DIRECTORY`, the packaged unit's), else none.
    package var answerJournal: AnswerJournalPlace = .besideDatabase

    /// `outbox.answer_journal`.
    package enum AnswerJournalPlace: Sendable, Equatable {
        case besideDatabase
        case directory(String)
        case off

        /// The directory for a store at `databaseURL`, nil for none. `stateDirectory` is systemd's
        /// `STATE_DIRECTORY` (absolute paths separated by colons; the first is taken): a directory
        /// kept across restarts and owned by the service, so a default that is safe for a server
        /// whose store has no file of its own.
        package func directory(databaseURL: String, stateDirectory: String?) -> String? {
            switch self {
            case .off: return nil
            case .directory(let path): return path
            case .besideDatabase:
                if databaseURL.hasPrefix("sqlite://") { return databaseURL.sqliteFilePath.map { $0 + "-answers" } }
                guard
                    let first = stateDirectory?.split(separator: ":", omittingEmptySubsequences: true).first,
                    first.hasPrefix("/")
                else { return nil }
                return first.hasSuffix("/") ? "\(first)answers" : "\(first)/answers"
            }
        }
    }

    /// The longest `Retry-After` honoured: an hour.
    package static let maximumProviderWait: TimeInterval = 3600

    package init(
        batchSize: Int = 5_000, idleInterval: Duration = .milliseconds(200), maximumInFlight: Int = 10_000,
        recordInterval: Duration = .milliseconds(50), batchDeadline: TimeInterval = 120,
        shutdownGrace: TimeInterval = 20,
        maximumAttempts: Int = 20, retryBaseDelay: TimeInterval = 5, retryMaximumDelay: TimeInterval = 300,
        maximumAge: TimeInterval = 86_400, retention: TimeInterval = 604_800, retentionInterval: Duration = .seconds(60)
    ) {
        self.maximumAge = maximumAge
        self.retention = retention
        self.retentionInterval = retentionInterval
        self.batchSize = batchSize
        self.idleInterval = idleInterval
        self.maximumInFlight = maximumInFlight
        self.recordInterval = recordInterval
        self.batchDeadline = batchDeadline
        self.shutdownGrace = shutdownGrace
        self.maximumAttempts = maximumAttempts
        self.retryBaseDelay = retryBaseDelay
        self.retryMaximumDelay = retryMaximumDelay
    }

    /// The outbox's wait before the next try of a delivery that has had `attempts` attempts:
    /// `retryBaseDelay · 2^(attempts−1)`, at most `retryMaximumDelay`, and never less than what
    /// the provider asked for (`Retry-After`, honoured up to `maximumProviderWait`).
    package func retryDelay(attempts: Int, providerAsked: TimeInterval? = nil) -> TimeInterval {
        let exponent = Double(min(max(attempts - 1, 0), 20))
        let schedule = min(retryMaximumDelay, retryBaseDelay * pow(2, exponent))
        let asked =
            providerAsked.map { $0.isFinite ? min(max($0, 0), Self.maximumProviderWait) : Self.maximumProviderWait }
            ?? 0
        return max(schedule, asked)
    }
}
