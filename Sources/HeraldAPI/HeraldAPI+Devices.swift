import Foundation
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldSchedule
import HeraldStore
import Hummingbird
import NIOCore

/// Devices, users and their preferences, and the catalog a device reads (categories, tracks).
extension HeraldAPI {
    static func addDeviceRoutes(to routes: AppRoutes, runtime: HeraldRuntime) {
        routes.clientWrite.post("devices") { request, context in
            let caller = try context.authorized()
            let (app, role, tokenUser) = (caller.app, caller.role, caller.tokenUser)
            let body = try await decode(DeviceBody.self, request)
            let device = try body.validated(endpoints: app.webpushEndpoints, serverKeys: app.webpushKeys)
            if let tokenUser, tokenUser != device.userID {
                throw APIError(
                    .forbidden, code: "forbidden", message: "the user token is for another user than user_id",
                    field: "user_id")
            }
            do {
                let (stored, created) = try await runtime.store.devices.upsertDevice(
                    appID: app.id, device, rules: app.registrationRules(client: role == .client))
                return try JSONResponse.make(DeviceView(device: stored), status: created ? .created : .ok)
            } catch let error as StoreError where error.code == .conflict {
                throw APIError(
                    .forbidden, code: "forbidden",
                    message:
                        "device_id is registered to another user: only that device, presenting the token it holds, can sign in as a new user",
                    field: "device_id")
            }
        }
        routes.server.post("devices/import") { request, context in
            let app = try context.authorized().app
            let imported = try await importDevices(request, app: app, runtime: runtime)
            return try JSONResponse.make(["imported": imported])
        }
        routes.clientOwned.delete("devices/:device") { request, context in
            let caller = try context.authorized()
            let deviceID = try pathParameter(context, "device", field: "device_id")
            let removal = try await runtime.store.devices.removeDevice(
                appID: caller.app.id, deviceID: deviceID, ownedBy: caller.tokenUser)
            guard removal != .ownedByAnotherUser else {
                throw APIError(
                    .forbidden, code: "forbidden",
                    message: "the device is registered to another user than the user token's",
                    field: "device_id")
            }
            return Response(status: .noContent)
        }
        routes.server.get("users/:user/devices") { request, context in
            let app = try context.authorized().app
            let userID = try validUserID(context)
            let parameters = request.uri.queryParameters
            let limit = try queryNumber(request, "limit", default: 100, in: 1...1000)
            var after: DeviceRepository.DeviceCursor?
            if let text = parameters.get("cursor"), !text.isEmpty {
                guard let cursor = DeviceCursorText.decode(text) else {
                    throw APIError.invalid("cursor", "cursor is the next_cursor of an earlier page")
                }
                after = cursor
            }
            let page = try await runtime.store.devices.devicePage(
                appID: app.id, userID: userID, limit: limit, after: after)
            return try JSONResponse.make(
                DevicePageView(
                    devices: page.devices.map(DeviceView.init), nextCursor: page.next.map(DeviceCursorText.encode)))
        }
        routes.clientRead.get("webpush/key") { _, context in
            let app = try context.authorized().app
            guard let current = app.webpushKeys.first else {
                throw APIError(
                    .notFound, code: "not_found",
                    message: "web push is off for this app: \(app.webpushDisabledReason ?? "no VAPID key")",
                    field: "app")
            }
            return try JSONResponse.make(
                WebPushKeyView(publicKey: current, deprecatedKeys: Array(app.webpushKeys.dropFirst())))
        }
        routes.clientRead.get("catalog/categories") { request, context in
            let app = try context.authorized().app
            guard let catalog = app.catalog else {
                throw APIError(.notFound, code: "no_catalog", message: "app \"\(app.id)\" has no catalog", field: "app")
            }
            return try JSONResponse.make(CategoryCatalog(catalog: catalog))
        }
        routes.clientRead.get("catalog/tracks") { request, context in
            let app = try context.authorized().app
            guard let catalog = app.catalog else {
                throw APIError(.notFound, code: "no_catalog", message: "app \"\(app.id)\" has no catalog", field: "app")
            }
            let locale = request.uri.queryParameters.get("locale")
            return try JSONResponse.make(TrackCatalog(catalog: catalog, locale: locale))
        }
        routes.server.put("users/:user") { request, context in
            let app = try context.authorized().app
            let userID = try validUserID(context)
            let body = try await decode(UserBody.self, request)
            try body.validate()
            let attributes = try JSONEncoder().encode(body.attributes ?? .object([:]))
            let before = try await runtime.store.users.user(appID: app.id, userID: userID)?.timeZone
            let record = try await runtime.store.users.upsertUser(
                appID: app.id, userID: userID, timeZone: body.timeZone, locale: body.locale, attributes: attributes)
            if record.timeZone != before, let name = record.timeZone, let zone = TimeZone(identifier: name) {
                // Wall-clock track steps follow the user to the new zone.
                try await Tracks.replan(
                    app: app, userID: userID, from: before.flatMap(TimeZone.init(identifier:)), to: zone,
                    runtime: runtime)
            }
            return try JSONResponse.make(UserView(record: record))
        }
        routes.server.get("users/:user") { request, context in
            let app = try context.authorized().app
            guard let record = try await runtime.store.users.user(appID: app.id, userID: try validUserID(context))
            else {
                throw APIError(.notFound, code: "not_found", message: "no such user", field: "user_id")
            }
            return try JSONResponse.make(UserView(record: record))
        }
        routes.server.put("users/:user/preferences") { request, context in
            let app = try context.authorized().app
            let userID = try validUserID(context)
            let preferences = try await decode(UserPreferences.self, request)
            try preferences.validate(catalog: app.catalog)
            let record = try await runtime.store.users.setPreferences(
                appID: app.id, userID: userID, preferences: try JSONEncoder().encode(preferences))
            let stored = try JSONDecoder().decode(UserPreferences.self, from: record.preferences)
            return try JSONResponse.make(stored.withDefaults(from: app.catalog))
        }
        routes.server.get("users/:user/preferences") { request, context in
            let app = try context.authorized().app
            let record = try await runtime.store.users.user(appID: app.id, userID: try validUserID(context))
            let preferences = record.flatMap { try? JSONDecoder().decode(UserPreferences.self, from: $0.preferences) }
            return try JSONResponse.make((preferences ?? UserPreferences()).withDefaults(from: app.catalog))
        }
    }
}

/// `GET …/webpush/key`: the VAPID public key a web app subscribes with (`applicationServerKey`),
/// and those rotated out whose subscriptions still work.
struct WebPushKeyView: Encodable {
    var publicKey: String
    var deprecatedKeys: [String]

    enum CodingKeys: String, CodingKey {
        case publicKey = "public_key"
        case deprecatedKeys = "deprecated_keys"
    }
}
