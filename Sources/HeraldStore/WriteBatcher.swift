import Synchronization

/// Small writes that many callers make at once — opens reported by devices — gathered for a
/// few milliseconds and written together: one durable transaction whose statements each take
/// every item of the batch (set-based, like a bulk insert), instead of a transaction, a handful
/// of statements and their thread hand-offs per item. Under load (the last batch held more than
/// one item, or items came while it was written) the first item of a batch waits `linger` for
/// others to join; a lone caller's item is written at once. If a batch's transaction fails,
/// each of its items is written again in a batch of its own, so one bad item never fails another.
/// Its transactions are the writer's background work: other writes waiting go first. What a
/// batch only reads (the deliveries its items speak of) is read before, on a reading connection
/// where there is one (SQLite files), so the writer is held for the writes alone.
final class WriteBatcher<Item: Sendable, Lookup: Sendable, Output: Sendable>: Sendable {
    /// Reads what `items` need, outside the writer.
    typealias LookUp = @Sendable (Session, [Item]) async throws -> Lookup
    /// Writes `items` inside the open transaction, with what was read for them; answers one
    /// outcome per item, in order.
    typealias Process = @Sendable (Session, [Item], Lookup) async throws -> [Result<Output, any Error>]

    private struct Waiting {
        var item: Item
        var resume: @Sendable (Result<Output, any Error>) -> Void
    }

    private struct State {
        var waiting: [Waiting] = []
        var scheduled = false
        /// Whether the next batch lingers: the last one was shared, or others waited behind it.
        var busy = false
    }

    private let state = Mutex(State())
    private let linger: Duration
    private let maximumBatch: Int
    /// Batches written, and items in them (tests and diagnostics).
    let batches = Atomic<Int>(0)
    let items = Atomic<Int>(0)

    init(linger: Duration, maximumBatch: Int) {
        self.linger = linger
        self.maximumBatch = maximumBatch
    }

    /// Writes `item` with the next batch of `store`, by `lookUp` and `process` (every caller of
    /// one batcher passes the same); `completion` gets its outcome, on the thread that wrote the
    /// batch, once the batch is on disk (a caller that can wait wraps it in a continuation; an
    /// event loop cannot).
    func submit(
        _ item: Item, _ store: HeraldStore, lookUp: @escaping LookUp, _ process: @escaping Process,
        completion: @escaping @Sendable (Result<Output, any Error>) -> Void
    ) {
        let lead: Duration? = state.withLock { state in
            state.waiting.append(Waiting(item: item, resume: completion))
            guard !state.scheduled else { return nil }
            state.scheduled = true
            return state.busy ? linger : .zero
        }
        if let lead {
            Task {
                if lead > .zero { try? await Task.sleep(for: lead) }
                await flush(store, lookUp, process)
            }
        }
    }

    /// Writes the waiting items, a batch at a time; items arriving meanwhile form a batch of
    /// their own, after their own linger.
    private func flush(_ store: HeraldStore, _ lookUp: LookUp, _ process: Process) async {
        while true {
            let (batch, more) = state.withLock { state in
                let batch = Array(state.waiting.prefix(maximumBatch))
                state.waiting.removeFirst(batch.count)
                if state.waiting.isEmpty { state.scheduled = false }
                return (batch, !state.waiting.isEmpty)
            }
            guard !batch.isEmpty else { return }
            batches.add(1, ordering: .relaxed)
            items.add(batch.count, ordering: .relaxed)
            do {
                try await write(batch, store, lookUp, process)
            } catch  where batch.count > 1 {
                for waiting in batch {
                    do { try await write([waiting], store, lookUp, process) } catch {
                        waiting.resume(.failure(error))
                    }
                }
            } catch {
                batch[0].resume(.failure(error))
            }
            state.withLock { state in state.busy = batch.count > 1 || !state.waiting.isEmpty }
            // More than a batch was waiting: the rest goes next, without lingering.
            guard more else { return }
        }
    }

    /// Writes `batch` in one durable transaction and resumes its callers; throws (resuming
    /// none) when the transaction failed.
    private func write(_ batch: [Waiting], _ store: HeraldStore, _ lookUp: LookUp, _ process: Process) async throws {
        let items = batch.map(\.item)
        let lookup = try await store.reading(.reports) { session in try await lookUp(session, items) }
        // Reports from devices wait for the API's and the outbox's writes, never the reverse.
        let outcomes = try await store.transaction(durable: true, background: true) { session in
            try await process(session, items, lookup)
        }
        guard outcomes.count == batch.count else {
            throw StoreError(.corrupt, "a batch of \(batch.count) writes answered \(outcomes.count) outcomes")
        }
        for (waiting, outcome) in zip(batch, outcomes) { waiting.resume(outcome) }
    }
}
