import Foundation
import HeraldHTTP2
import NIOCore
import NIOHPACK

/// Feeds arbitrary bytes, as a server would send them, through what the HTTP/2 client does with
/// a server's bytes: the frame parser (split at a point the input chooses), HPACK decoding of
/// header blocks, SETTINGS, WINDOW_UPDATE and flow control. Any trap, crash or unbounded growth
/// is a bug; thrown connection errors are the expected answer to garbage.
enum HTTP2FrameFuzzer {
    static func run(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty else { return }
        // The first byte picks where the input is split into two reads.
        let split = bytes.count > 1 ? Int(bytes[0]) % bytes.count : 0
        var parser = HTTP2FrameParser()
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator(), useHuffmanEncoding: false)
        var peer = HTTP2ClientPeerState(streamLimitCap: 1000)
        var output = ByteBuffer()
        var body = HTTP2OutgoingBody(ByteBuffer(repeating: 0x61, count: 3_000), window: 1_000)
        for part in [bytes[1..<max(1, split)], bytes[max(1, split)...]] {
            var chunk = ByteBuffer(bytes: part)
            parser.append(&chunk)
            do {
                while let frame = try parser.next() {
                    switch HTTP2Wire.FrameType(rawValue: frame.type) {
                    case .headers?, .pushPromise?:
                        _ = try decoder.decodeBlock(of: frame)
                    case .data?:
                        try peer.received(data: frame)
                    case .settings?:
                        let delta = try peer.apply(settings: frame, encoder: &encoder, output: &output)
                        try body.grow(by: delta)
                    case .windowUpdate?:
                        if let (_, increment) = try peer.apply(windowUpdate: frame) { try body.grow(by: increment) }
                        _ = peer.writeBody(&body, streamID: 1, into: &output)
                    case .ping?:
                        HTTP2ClientPeerState.answer(ping: frame, output: &output)
                    default:
                        break
                    }
                    output.clear()
                }
                peer.acknowledgeReceived(into: &output)
            } catch {
                return
            }
        }
    }
}

#if FUZZING
    /// libFuzzer's driver (linked in by -sanitize=fuzzer); run from `main` because SwiftPM names the
    /// executable's entry point itself.
    // swift-format-ignore: AlwaysUseLowerCamelCase
    @_silgen_name("LLVMFuzzerRunDriver")
    func LLVMFuzzerRunDriver(
        _ argc: UnsafeMutablePointer<CInt>,
        _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
        _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
    ) -> CInt

    /// The entry libFuzzer's own `main` calls, when that is the one linked.
    @_cdecl("LLVMFuzzerTestOneInput")
    public func fuzzHTTP2Frames(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
        HTTP2FrameFuzzer.run(UnsafeRawBufferPointer(start: data, count: size))
        return 0
    }

    @main
    struct FuzzHTTP2Frames {
        static func main() {
            var argc = CommandLine.argc
            var argv = CommandLine.unsafeArgv
            let status = LLVMFuzzerRunDriver(&argc, &argv) { data, size in
                HTTP2FrameFuzzer.run(UnsafeRawBufferPointer(start: data, count: size))
                return 0
            }
            exit(status)
        }
    }
#else
    /// Without libFuzzer: replays the files given (the seed corpus, a crash reproducer).
    @main
    struct ReplayHTTP2Frames {
        static func main() throws {
            var count = 0
            for path in CommandLine.arguments.dropFirst() {
                let files =
                    (try? FileManager.default.contentsOfDirectory(atPath: path)).map { $0.map { path + "/" + $0 } } ?? [
                        path
                    ]
                for file in files.sorted() {
                    let data = try Data(contentsOf: URL(fileURLWithPath: file))
                    data.withUnsafeBytes { HTTP2FrameFuzzer.run($0) }
                    count += 1
                }
            }
            print("replayed \(count) inputs")
        }
    }
#endif
