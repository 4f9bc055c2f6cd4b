import HeraldServer
import Logging
import Synchronization
import Testing

/// `herald serve`'s text logs: the lines `StreamLogHandler` writes, metadata rendered per line.
@Suite("Text log lines")
struct TextLogHandlerTests {
    final class Lines: TextOutputStream, Sendable {
        let lines = Mutex<[String]>([])
        func write(_ string: String) { lines.withLock { $0.append(string) } }
        /// The lines without their timestamps (the first word), which differ by the second.
        var untimed: [String] { lines.withLock { $0.map { String($0.drop { $0 != " " }) } } }
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String { "the disk is full" }
    }

    /// The same calls through both handlers: base metadata set and changed, the provider's,
    /// the call's overriding both, an error, a level below the threshold.
    static func exercise(_ handler: some LogHandler) {
        var logger = Logger(label: "herald.test") { _ in handler }
        logger.logLevel = .info
        logger.info("no metadata")
        logger[metadataKey: "hb.request.id"] = "0123abcd"
        logger[metadataKey: "apns.connection"] = "2"
        logger.notice("with the logger's", metadata: ["herald.app": "demo"])
        logger[metadataKey: "apns.connection"] = nil
        logger.warning("the call wins", metadata: ["hb.request.id": "override", "list": ["a", "b"]])
        logger.error("with an error", error: Failure())
        logger.debug("below the level", metadata: ["never": "written"])
        var copy = logger
        copy[metadataKey: "only.the.copy"] = "yes"
        copy.info("a copy's metadata")
        logger.info("not the original's")
    }

    @Test("lines are StreamLogHandler's, byte for byte after the timestamp")
    func sameLines() {
        let provider = Logger.MetadataProvider { ["trace.id": "t-1", "hb.request.id": "from-provider"] }
        let ours = Lines()
        let theirs = Lines()
        Self.exercise(TextLogHandler(label: "herald.test", stream: ours, metadataProvider: provider))
        Self.exercise(StreamLogHandler(label: "herald.test", stream: theirs, metadataProvider: provider))
        #expect(ours.untimed.count == 6)
        #expect(ours.untimed == theirs.untimed)
        #expect(ours.untimed[1].contains("apns.connection=2 hb.request.id=from-provider herald.app=demo trace.id=t-1"))

        let plainOurs = Lines()
        let plainTheirs = Lines()
        Self.exercise(TextLogHandler(label: "herald.test", stream: plainOurs))
        Self.exercise(StreamLogHandler(label: "herald.test", stream: plainTheirs, metadataProvider: nil))
        #expect(plainOurs.untimed == plainTheirs.untimed)
        #expect(plainOurs.untimed[0] == " info herald.test: [HeraldServerTests] no metadata\n")
        #expect(plainOurs.untimed[4].contains("only.the.copy=yes"))
        #expect(!plainOurs.untimed[5].contains("only.the.copy"))
    }
}
