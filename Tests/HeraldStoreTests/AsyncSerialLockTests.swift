import Synchronization
import Testing

@testable import HeraldStore

/// The SQLite writer's lock: first come, first served, except that device reports' batches let
/// later writes go first, a bounded number of times.
@Suite("The writer's lock")
struct AsyncSerialLockTests {
    final class Order: Sendable {
        let taken = Mutex<[Int]>([])
    }

    /// Holds the lock, queues `waiters` (true: background) one after another, lets go, and
    /// answers the order they got it in.
    static func order(_ waiters: [Bool]) async throws -> [Int] {
        let lock = AsyncSerialLock()
        let order = Order()
        let (held, hold) = AsyncStream<Void>.makeStream()
        let (release, letGo) = AsyncStream<Void>.makeStream()
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await lock.withLock {
                    hold.yield()
                    for await _ in release { break }
                }
            }
            for await _ in held { break }
            for (index, background) in waiters.enumerated() {
                group.addTask {
                    try await lock.withLock(background: background) { order.taken.withLock { $0.append(index) } }
                }
                while lock.waiting < index + 1 { await Task.yield() }
            }
            letGo.yield()
            try await group.waitForAll()
            return order.taken.withLock { $0 }
        }
    }

    @Test("a background waiter lets later writes go first, at most four times; the rest keep their order")
    func priority() async throws {
        #expect(try await Self.order([false, false, false]) == [0, 1, 2])
        #expect(try await Self.order([true, false, false]) == [1, 2, 0])
        #expect(try await Self.order([true, true, false]) == [2, 0, 1])
        #expect(try await Self.order([true, false, false, false, false, false, false]) == [1, 2, 3, 4, 0, 5, 6])
        #expect(try await Self.order([false, true, false]) == [0, 2, 1])
        #expect(try await Self.order([true, true]) == [0, 1])
    }
}
