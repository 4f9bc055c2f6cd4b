import Foundation
public import HeraldPayload

/// The categories to register: Herald's catalog (`GET …/catalog/categories`)
/// merged with the app's own, at most 2 actions each (what a lock screen shows), and every action
/// of a high-stakes type's category behind authentication. The last good copy from Herald is
/// kept: offline, or when Herald answers an error, the app still registers what it had.
extension CategoryCatalog {
    public static let maximumActions = 2
    static let storeKey = "herald.categories"

    /// What to register: Herald's categories, then the app's (an app category with the same id
    /// replaces Herald's), each cut to `maximumActions`, high-stakes ones behind authentication.
    public func merged(with own: [CategorySpec]) -> [CategorySpec] {
        var result = categories.filter { category in !own.contains { $0.id == category.id } } + own
        for index in result.indices {
            let category = result[index]
            let high = types.contains { $0.category == category.id && $0.stakes >= .high }
            result[index].actions = Array(category.actions.prefix(Self.maximumActions)).map { action in
                var action = action
                if high { action.authenticationRequired = true }
                return action
            }
        }
        return result
    }

    /// The stored last good copy.
    public static func cached(in store: any KeyValueStore) -> CategoryCatalog? {
        HeraldClient.stored(storeKey, in: store)
    }
}

extension HeraldClient {
    /// Herald's categories for this app, fetched now (client key) and kept as the last good
    /// copy; offline or on an error answer, the copy kept last time (or none).
    public func categories() async -> CategoryCatalog? {
        await catalogDocument("catalog/categories", storeKey: CategoryCatalog.storeKey)
    }

    /// Herald's lifecycle tracks with their copy in `locale` (the device's language, e.g.
    /// `fr-CA`: then `fr`, then the catalog's default), for `LocalTrackScheduler`: the catalog's
    /// own definition, so a step fires on the device when the server would send it. Fetched now
    /// and kept as the last good copy (per locale); offline, the copy kept last time (or none).
    public func tracks(locale: String? = nil) async -> TrackCatalog? {
        let query =
            locale.flatMap { $0.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed) }.map { "?locale=\($0)" }
            ?? ""
        return await catalogDocument("catalog/tracks" + query, storeKey: "herald.tracks." + (locale ?? ""))
    }

    /// A catalog document read with the client key, and the last good copy of it.
    private func catalogDocument<Document: Codable>(_ tail: String, storeKey: String) async -> Document? {
        let request = HTTPRequestSpec(
            method: "GET", path: "/v1/apps/\(Self.escaped(configuration.appID))/" + tail,
            headers: ["Authorization": "Bearer \(configuration.clientKey)"])
        if let response = try? await transport.send(request), response.status == 200,
            let document = try? JSONDecoder().decode(Document.self, from: response.body)
        {
            store.set(try? JSONEncoder().encode(document), forKey: storeKey)
            return document
        }
        return Self.stored(storeKey, in: store)
    }

    /// A catalog document's last good copy in the store.
    static func stored<Document: Decodable>(_ key: String, in store: any KeyValueStore) -> Document? {
        store.data(forKey: key).flatMap { try? JSONDecoder().decode(Document.self, from: $0) }
    }
}
