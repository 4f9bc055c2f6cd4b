public import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The transport over `URLSession` to Herald at `baseURL` (Linux too, through FoundationNetworking).
public struct URLSessionTransport: HTTPTransport {
    public var baseURL: URL
    public var timeout: TimeInterval

    public init(baseURL: URL, timeout: TimeInterval = 15) {
        self.baseURL = baseURL
        self.timeout = timeout
    }

    public func send(_ request: HTTPRequestSpec) async throws -> HTTPResponseSpec {
        guard let url = URL(string: request.path, relativeTo: baseURL) else { throw URLError(.badURL) }
        var urlRequest = URLRequest(url: url, timeoutInterval: timeout)
        urlRequest.httpMethod = request.method
        for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
        urlRequest.httpBody = request.body
        let (data, response) = try await URLSession.shared.data(for: urlRequest)
        return HTTPResponseSpec(status: (response as? HTTPURLResponse)?.statusCode ?? 0, body: data)
    }
}
