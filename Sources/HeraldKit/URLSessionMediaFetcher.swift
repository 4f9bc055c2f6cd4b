public import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The media fetcher over `URLSession`: a download task streams the file to disk (an extension
/// has about 24 MB of memory: the media never passes through it), the file is refused past
/// `maximumBytes` (by its announced length, before the body, and by its size on disk), and it is
/// moved under `directory` with the URL's extension (UNNotificationAttachment reads the type from
/// it). Cancelling the task (the service extension's 2 s budget) cancels the download.
public struct URLSessionMediaFetcher: MediaFetcher {
    public struct Refused: Error, Equatable, CustomStringConvertible {
        public var description: String
    }

    public var directory: URL
    public var timeout: TimeInterval

    public init(directory: URL = FileManager.default.temporaryDirectory, timeout: TimeInterval = 10) {
        self.directory = directory
        self.timeout = timeout
    }

    public func fetch(_ url: URL, maximumBytes: Int) async throws -> URL {
        guard let scheme = url.scheme?.lowercased(), scheme == "https" || scheme == "http" else {
            throw Refused(description: "media URLs are http(s): \(url.scheme ?? "none")")
        }
        let (downloaded, response) = try await URLSession.shared.download(
            for: URLRequest(url: url, timeoutInterval: timeout))
        defer { try? FileManager.default.removeItem(at: downloaded) }
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        guard (200..<300).contains(status) else { throw Refused(description: "the media answered HTTP \(status)") }
        let size = (try? FileManager.default.attributesOfItem(atPath: downloaded.path)[.size] as? Int) ?? 0
        guard response.expectedContentLength <= Int64(maximumBytes), size <= maximumBytes else {
            throw Refused(
                description:
                    "the media is \(max(Int64(size), response.expectedContentLength)) bytes, over \(maximumBytes)")
        }
        try Task.checkCancellation()
        let name = UUID().uuidString + (url.pathExtension.isEmpty ? "" : ".\(url.pathExtension)")
        let destination = directory.appendingPathComponent(name)
        try FileManager.default.moveItem(at: downloaded, to: destination)
        return destination
    }
}
