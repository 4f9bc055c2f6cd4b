package import HeraldCore

/// Answers a stopped process had and never wrote (its answer journal, read back at the next
/// start): written under the claims that process held, as its own writes would have been.
extension OutboxRepository {
    /// What writing a stopped node's journaled answers came to.
    package struct JournaledAnswers: Sendable, Equatable {
        /// Written now: their deliveries are no longer sent again.
        package var written = 0
        /// Already written before the process stopped (a journal keeps answers until the write
        /// that took them commits), or no longer that node's (its claim was taken back).
        package var skipped = 0

        package init(written: Int = 0, skipped: Int = 0) {
            self.written = written
            self.skipped = skipped
        }
    }

    /// Writes `results`, answers node `node` received and did not write, under its claims. What
    /// was written already is left out first, so nothing is counted twice: a delivery with its
    /// own row only while that row is still `sending` under the result's claim (or was cancelled
    /// while in flight), a page's delivery only while it has no row yet. Every write is then
    /// fenced as usual: a page is written only while `node` holds it under the result's claim,
    /// so a page another node took back keeps what that node does with it.
    package func recordAnswers(of node: String, _ results: [DeliveryResult]) async throws -> JournaledAnswers {
        var answers = JournaledAnswers()
        for chunk in results.chunked(Self.batchSize) {
            let open = try await reading { session in
                try await session.query(
                    """
                    SELECT id, claim, status FROM deliveries
                    WHERE id IN (\(SQLText.placeholders(chunk.count, from: 1)))
                    """, chunk.map { .integer($0.deliveryID) })
            }
            var rows: [Int64: (claim: Int64, status: String)] = [:]
            for row in open where row.count == 3 {
                guard let id = row[0].integer, let claim = row[1].integer, let status = row[2].text else { continue }
                rows[id] = (claim, status)
            }
            let unwritten = chunk.filter { result in
                guard let row = rows[result.deliveryID] else { return result.broadcast != nil }
                return result.broadcast == nil && row.claim == result.claim
                    && (row.status == DeliveryStatus.sending.rawValue
                        || row.status == DeliveryStatus.cancelled.rawValue)
            }
            answers.skipped += chunk.count - unwritten.count
            guard !unwritten.isEmpty else { continue }
            let written = try await HeraldStore.$writingFor.withValue(node) {
                try await recordResults(unwritten)
            }
            answers.written += written
            answers.skipped += unwritten.count - written
        }
        return answers
    }
}
