package import Foundation
import HeraldPayload

/// Turns a draft into what the outbox stores: the content every recipient device shares (for a
/// typed send, what the dispatcher needs to render it per device), its due time and lane. Every
/// check a provider would make is made here, against the longest stamp a delivery can carry,
/// so a refused notification is a 4xx at the API, never a failure per device later.
package enum NotificationComposer {
    /// Keys Herald writes under the payload key when sending by type.
    package static let reservedDataKeys: Set<String> = ["type", "deep_link", "group_summary"]

    /// Checks `draft` and composes notification `id` for an app whose payload key is
    /// `payloadKey`; `platforms` the providers besides APNs the app sends through (their limits
    /// are checked too).
    package static func compose(
        _ draft: NotificationDraft, payloadKey: String, catalog: Catalog?, platforms: PushPlatforms, now: Date,
        id: UUID = UUID.random()
    ) throws(CompositionError) -> ComposedNotification {
        var catalogType: CatalogType?
        if let type = draft.type {
            guard let catalog else {
                throw .invalid("type", "this app has no catalog (apps[].catalog); send alert fields instead")
            }
            guard let found = catalog.type(type) else {
                let known = catalog.types.map(\.name).joined(separator: ", ")
                throw .invalid("type", "unknown type \"\(type)\"; the catalog has \(known)")
            }
            catalogType = found
        }
        let visible = draft.alert != nil || draft.badge != nil || draft.sound != nil
        let pushType =
            draft.pushType.map(APNSPushType.init(rawValue:)) ?? catalogType?.pushType
            ?? NotificationContent.defaultPushType(contentAvailable: draft.contentAvailable == true, visible: visible)
        guard pushType.isKnown else {
            throw .invalid(
                "push_type", "push_type is one of \(APNSPushType.known.map(\.rawValue).joined(separator: ", "))")
        }
        guard !pushType.needsOwnToken else {
            // Sent to a device's regular token, APNs answers DeviceTokenNotForTopic: a fleet
            // would look dead. Devices register one token today.
            throw .invalid(
                "push_type",
                "push_type \(pushType.rawValue) needs a token of its own (PushKit, Live Activity …), which devices cannot register yet; use alert or background"
            )
        }
        let priority =
            draft.priority.map(APNSPriority.init(rawValue:)) ?? catalogType?.priority
            ?? NotificationContent.defaultPriority(for: pushType)
        guard priority.isValid else { throw .invalid("priority", "priority is 10, 5 or 1") }
        if pushType == .background && priority == .immediate {
            throw .invalid("priority", "background pushes must use priority 5")
        }
        if let collapseID = draft.collapseID, collapseID.utf8.count > APNSNotification.collapseIDLimit {
            throw .invalid("collapse_id", "collapse_id is at most 64 bytes")
        }
        var interruption: APSInterruptionLevel?
        if let level = draft.interruptionLevel {
            let known = APSInterruptionLevel(rawValue: level)
            guard APSInterruptionLevel.known.contains(known) else {
                throw .invalid(
                    "interruption_level", "interruption_level is passive, active, time-sensitive or critical")
            }
            interruption = known
        }
        if let score = draft.relevanceScore, !(0...1).contains(score) {
            throw .invalid("relevance_score", "relevance_score is between 0 and 1")
        }
        if let expiration = draft.expiration, expiration < 0 {
            throw .invalid("expiration", "expiration is UNIX seconds ≥ 0")
        }
        if let badge = draft.badge, badge < 0 { throw .invalid("badge", "badge is 0 or more") }
        let data = draft.data
        if let data, data.objectValue == nil { throw .invalid("data", "data must be a JSON object") }
        if let data, data.depth > NotificationDraft.maximumDataDepth {
            throw .invalid(
                "data", "data nests objects and arrays more than \(NotificationDraft.maximumDataDepth) levels deep")
        }
        if let key = data?.objectValue?.keys.sorted().first(where: FCMMessage.isReservedDataKey) {
            throw .invalid("data.\(key)", "data.\(key) is reserved by FCM (from, message_type, google*, gcm*)")
        }
        if data?.objectValue?[HeraldStamp.key] != nil {
            throw .invalid(
                "data.\(HeraldStamp.key)", "data.\(HeraldStamp.key) is where Herald puts each delivery's ids")
        }
        if let channel = draft.androidChannelID, channel.isEmpty || channel.utf8.count > 256 {
            throw .invalid("android.channel_id", "android.channel_id is 1 to 256 bytes")
        }
        if let image = draft.androidImage {
            guard let url = URL(string: image), url.scheme == "https" || url.scheme == "http",
                url.host?.isEmpty == false,
                image.utf8.count <= 2048
            else { throw .invalid("android.image", "android.image is an http(s) URL of at most 2048 bytes") }
        }
        var dueAt = now
        if let deliverAt = draft.deliverAt {
            guard let date = HeraldTime.parse(deliverAt) else {
                throw .invalid("deliver_at", "deliver_at is an RFC 3339 time such as 2026-11-23T09:00:00Z")
            }
            guard date <= now.addingTimeInterval(NotificationDraft.maximumScheduleAhead) else {
                throw .invalid("deliver_at", "deliver_at is at most a year ahead")
            }
            dueAt = max(now, date)
        }
        let alert = draft.alert
        let content = NotificationContent(
            pushType: pushType, priority: priority, title: alert?.title, subtitle: alert?.subtitle, body: alert?.body,
            badge: draft.badge, sound: draft.sound, threadID: draft.threadID, category: draft.category,
            contentAvailable: draft.contentAvailable ?? false, mutableContent: draft.mutableContent ?? false,
            interruptionLevel: interruption, relevanceScore: draft.relevanceScore, collapseID: draft.collapseID,
            expiration: draft.expiration, data: data?.objectValue, androidChannelID: draft.androidChannelID,
            image: draft.androidImage)
        // A scheduled send's age (outbox.max_age) counts from when it is due.
        let deliverAt = dueAt > now ? dueAt : nil
        // Urgent (claimed before bulk sends): a transactional type, or priority 10 asked for. An
        // alert's default priority 10 alone does not make a fan-out urgent.
        let urgent = draft.priority == 10 || catalogType?.transactional == true
        if let catalogType, let catalog {
            var stored = try typedContent(
                draft, catalogType, catalog: catalog, base: content, payloadKey: payloadKey, platforms: platforms,
                id: id)
            stored.deliverAt = deliverAt
            return ComposedNotification(content: stored, dueAt: dueAt, apnsPayload: nil, urgent: urgent)
        }
        let payload = try checkRendering(
            content, payloadKey: payloadKey, platforms: platforms, field: alert?.body != nil ? "alert.body" : "data",
            id: id)
        return ComposedNotification(
            content: StoredNotificationContent(content: content, deliverAt: deliverAt), dueAt: dueAt,
            apnsPayload: payload, urgent: urgent)
    }

    /// Renders the content for APNs (and FCM and web push when the app has them) and refuses
    /// what a provider would, counting each delivery's stamp: the first problem names `field`.
    /// Returns the APNs payload of notification `id`.
    @discardableResult
    package static func checkRendering(
        _ content: NotificationContent, payloadKey: String, platforms: PushPlatforms, field: String, id: UUID,
        actionTokens: [(id: Int, token: Int)] = []
    ) throws(CompositionError) -> APNSPayloadTemplate {
        do {
            let template = try APNSRenderer.template(
                content, payloadKey: payloadKey, notificationID: id, actionTokens: actionTokens)
            try APNSRenderer.check(template, pushType: content.pushType, field: field)
            let stampLength = HeraldStamp.maximumJSONLength(
                notificationID: template.notificationID, actionTokens: actionTokens)
            if platforms.contains(.fcm) {
                try FCMRenderer.check(FCMRenderer.message(content, now: Date()), field: field, stampLength: stampLength)
            }
            if platforms.contains(.webpush) {
                try WebPushRenderer.check(
                    content, payloadKey: payloadKey, notificationID: template.notificationID,
                    stampLength: stampLength, field: field)
            }
            return template
        } catch {
            throw CompositionError(rendering: error)
        }
    }

    /// A send by catalog type: resolves every field (the draft first, then the type), keeps what
    /// the dispatcher needs to render per device, and checks that the default-locale rendering
    /// can fit once the policy engine shortens the body.
    private static func typedContent(
        _ draft: NotificationDraft, _ type: CatalogType, catalog: Catalog, base: NotificationContent,
        payloadKey: String, platforms: PushPlatforms,
        id: UUID
    ) throws(CompositionError) -> StoredNotificationContent {
        let object = draft.data?.objectValue ?? [:]
        for key in object.keys where reservedDataKeys.contains(key) {
            throw .invalid("data.\(key)", "data.\(key) is set by Herald when sending by type")
        }
        var values: [String: String] = [:]
        for (key, value) in object {
            switch value {
            case .string(let text): values[key] = text
            case .int(let number): values[key] = String(number)
            case .double(let number): values[key] = String(number)
            case .bool(let flag): values[key] = String(flag)
            case .null: break
            case .array, .object:
                values[key] = (try? JSONEncoder().encode(value)).map { String(decoding: $0, as: UTF8.self) }
            }
        }
        let resolvedCollapseID = draft.collapseID ?? type.collapseID.flatMap { Placeholders.render($0, data: values) }
        if let resolvedCollapseID, resolvedCollapseID.utf8.count > APNSNotification.collapseIDLimit {
            throw .invalid(
                draft.collapseID != nil ? "collapse_id" : "data",
                "the collapse id \"\(resolvedCollapseID.prefix(80))\" is over 64 bytes")
        }
        var custom = object
        custom["type"] = .string(type.name)
        if let link = type.deepLink.flatMap({ Placeholders.render($0, data: values) }) {
            custom["deep_link"] = .string(link)
        }
        var content = base
        content.sound = draft.sound ?? type.sound
        content.threadID = draft.threadID ?? type.threadID.flatMap { Placeholders.render($0, data: values) }
        content.category = draft.category ?? type.category
        content.contentAvailable = draft.contentAvailable ?? (base.pushType == .background)
        content.mutableContent = draft.mutableContent ?? type.mutableContent
        content.interruptionLevel = base.interruptionLevel ?? type.interruptionLevel
        content.collapseID = resolvedCollapseID
        content.data = custom
        content.androidChannelID = draft.androidChannelID ?? type.androidChannel ?? catalog.app.androidChannel
        content.analyticsLabel = type.name
        let alert = draft.alert
        let typed = TypedContent(
            type: type.name, data: values, title: alert?.title, subtitle: alert?.subtitle, body: alert?.body)
        var stored = StoredNotificationContent(content: content, typed: typed)
        let copy =
            base.pushType == .background && alert == nil
            ? nil : type.render(locale: nil, defaultLocale: catalog.app.defaultLocale, data: values)
        var decided = stored.policyContent(copy: copy)
        stored.content = stored.deviceContent(copy: copy, decided: decided)
        // The policy engine may shorten the body to "…"; without it the rest must fit.
        decided.body = decided.body.map { _ in "…" }
        try checkRendering(
            stored.deviceContent(copy: copy, decided: decided), payloadKey: payloadKey, platforms: platforms,
            field: "data", id: id,
            actionTokens: type.actionTokenLengths)
        return stored
    }
}

/// The layout of a quick action's token (signed by the server): base64url of
/// `version (1 byte) | delivery id (8) | expiry (4) | action id (UTF-8) | tag (16)`.
package enum ActionTokenLayout {
    package static let tagBytes = 16
    /// The longest action id a token carries.
    package static let maximumActionBytes = 64
    /// The action an open reports for a plain tap: no catalog action may take this id.
    package static let tapAction = "default"

    /// The length of a token for `action` (every token for it has this length).
    package static func length(action: String) -> Int {
        let bytes = 1 + 8 + 4 + action.utf8.count + tagBytes
        return (bytes * 4 + 2) / 3
    }
}

extension CatalogType {
    /// The byte lengths of each action's id and token (what a stamp's `a` adds to a payload).
    package var actionTokenLengths: [(id: Int, token: Int)] {
        actions.map { ($0.id.utf8.count, ActionTokenLayout.length(action: $0.id)) }
    }
}
