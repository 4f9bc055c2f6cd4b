// The catalog as devices read it (wire types shared by the server and HeraldKit, so a
// change on one side breaks the other's build or tests): the categories and actions to register
// (`GET …/catalog/categories`) and the lifecycle tracks to schedule locally (`GET …/catalog/tracks`).

/// An action button of a category (UNNotificationAction without UserNotifications).
public struct ActionSpec: Sendable, Codable, Equatable {
    public var id: String
    public var title: String
    public var authenticationRequired: Bool
    public var destructive: Bool
    public var textInput: Bool

    public init(
        id: String, title: String, authenticationRequired: Bool = false, destructive: Bool = false,
        textInput: Bool = false
    ) {
        self.id = id
        self.title = title
        self.authenticationRequired = authenticationRequired
        self.destructive = destructive
        self.textInput = textInput
    }

    enum CodingKeys: String, CodingKey {
        case id, title, destructive
        case authenticationRequired = "authentication_required"
        case textInput = "text_input"
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

/// Herald's categories and types for an app, as `GET …/catalog/categories` answers: the server
/// writes this type and HeraldKit reads it (`CategoryCatalog.merged(with:)` makes what to register).
public struct CategoryCatalog: Sendable, Codable, Equatable {
    public var categories: [CategorySpec]
    public var types: [TypeSpec]

    public init(categories: [CategorySpec] = [], types: [TypeSpec] = []) {
        self.categories = categories
        self.types = types
    }

    /// The type's stakes (by its name or catalog id); nil for a type Herald did not list.
    public func stakes(ofType type: String) -> Stakes? {
        types.first { $0.type == type || $0.id == type }?.stakes
    }
}

/// A lifecycle track as the device schedules it: the catalog's `tracks:`
/// entry (`{anchor, steps: [{id, type, after: "2d", at: "10:00"}]}`) with each step type's copy in
/// one locale, as `GET …/catalog/tracks` answers, so the same definition drives Herald's
/// server-side track and HeraldKit's `LocalTrackScheduler`.
public struct LocalTrack: Sendable, Codable, Equatable {
    public struct Step: Sendable, Codable, Equatable {
        public var id: String
        public var type: String
        /// After the anchor: `30m`, `36h`, `2d` (summed as in `1d12h`), as the catalog writes it.
        public var after: String
        /// The wall-clock time in the user's zone on that day (`10:00`), if any.
        public var at: String?
        /// Data defaults for the copy's placeholders; the enrolment's data overrides them.
        public var data: [String: String]?

        public init(id: String, type: String, after: String, at: String? = nil, data: [String: String]? = nil) {
            self.id = id
            self.type = type
            self.after = after
            self.at = at
            self.data = data
        }
    }

    /// A type's copy: `{placeholder}`s filled from the enrolment's data, `fallbackBody` when one is missing.
    public struct Copy: Sendable, Codable, Equatable {
        public var title: String
        public var body: String
        public var fallbackBody: String?
        public var deepLink: String?

        public init(title: String, body: String, fallbackBody: String? = nil, deepLink: String? = nil) {
            self.title = title
            self.body = body
            self.fallbackBody = fallbackBody
            self.deepLink = deepLink
        }

        enum CodingKeys: String, CodingKey {
            case title, body
            case fallbackBody = "fallback_body"
            case deepLink = "deep_link"
        }
    }

    public var name: String
    public var steps: [Step]
    /// Copy per step type.
    public var copy: [String: Copy]

    public init(name: String, steps: [Step], copy: [String: Copy]) {
        self.name = name
        self.steps = steps
        self.copy = copy
    }
}

/// What `GET …/catalog/tracks` answers.
public struct TrackCatalog: Sendable, Codable, Equatable {
    public var tracks: [LocalTrack]

    public init(tracks: [LocalTrack]) {
        self.tracks = tracks
    }
}
