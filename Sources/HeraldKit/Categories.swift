import Foundation
public import HeraldPayload

/// An action button of a category (UNNotificationAction without UserNotifications).
public struct ActionSpec: Sendable, Codable, Equatable {
    public var id: String
    public var title: String
    public var authenticationRequired: Bool
    public var destructive: Bool
    public var textInput: Bool

    public init(id: String, title: String, authenticationRequired: Bool = false, destructive: Bool = false, textInput: Bool = false) {
        self.id = id
        self.title = title
        self.authenticationRequired = authenticationRequired
        self.destructive = destructive
        self.textInput = textInput
    }

    enum CodingKeys: String, CodingKey {
        case id, title, destructive
        case authenticationRequired = "authentication_required", textInput = "text_input"
    }
}

/// A category to register with the notification center.
public struct CategorySpec: Sendable, Codable, Equatable {
    public var id: String
    /// The catalog types that use it.
    public var types: [String]
    public var actions: [ActionSpec]

    public init(id: String, types: [String] = [], actions: [ActionSpec]) {
        self.id = id
        self.types = types
        self.actions = actions
    }
}

/// A catalog type as the app routes it.
public struct TypeSpec: Sendable, Codable, Equatable {
    public var type: String
    public var id: String?
    public var category: String?
    public var stakes: Stakes

    public init(type: String, id: String?, category: String?, stakes: Stakes) {
        self.type = type
        self.id = id
        self.category = category
        self.stakes = stakes
    }
}

/// The categories to register (issue #14 §3, C5, K6): Herald's catalog (`GET …/catalog/categories`)
/// merged with the app's own, at most 2 actions each (what a lock screen shows), and every action
/// of a high-stakes type's category behind authentication. The last good copy from Herald is
/// kept: offline, or when Herald answers an error, the app still registers what it had.
public struct CategoryCatalog: Sendable, Codable, Equatable {
    public var categories: [CategorySpec]
    public var types: [TypeSpec]

    public static let maximumActions = 2
    static let storeKey = "herald.categories"

    public init(categories: [CategorySpec] = [], types: [TypeSpec] = []) {
        self.categories = categories
        self.types = types
    }

    /// The type's stakes (by its name or catalog id); nil for a type Herald did not list.
    public func stakes(ofType type: String) -> Stakes? {
        types.first { $0.type == type || $0.id == type }?.stakes
    }

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
        store.data(forKey: storeKey).flatMap { try? JSONDecoder().decode(CategoryCatalog.self, from: $0) }
    }
}

extension HeraldClient {
    /// Herald's categories for this app, fetched now (client key) and kept as the last good
    /// copy; offline or on an error answer, the copy kept last time (or none).
    public func categories() async -> CategoryCatalog? {
        let request = HTTPRequestSpec(
            method: "GET", path: "/v1/apps/\(Self.escaped(configuration.appID))/catalog/categories",
            headers: ["Authorization": "Bearer \(configuration.clientKey)"])
        if let response = try? await transport.send(request), response.status == 200,
            let catalog = try? JSONDecoder().decode(CategoryCatalog.self, from: response.body)
        {
            store.set(try? JSONEncoder().encode(catalog), forKey: CategoryCatalog.storeKey)
            return catalog
        }
        return CategoryCatalog.cached(in: store)
    }
}
