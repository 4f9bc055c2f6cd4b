import HeraldCore
import HeraldEngine
import HeraldPayload

// What devices read of an app's catalog, in the wire types HeraldKit decodes
// (HeraldPayload's CatalogWire.swift): the same Swift types on both sides.

extension CategoryCatalog {
    /// `GET …/catalog/categories`: each category once, with the types that use it and their
    /// actions (the first type to name an action gives its title), and every type's stakes.
    init(catalog: Catalog) {
        var byID: [String: CategorySpec] = [:]
        var order: [String] = []
        for type in catalog.types {
            guard let category = type.category else { continue }
            if byID[category] == nil {
                order.append(category)
                byID[category] = CategorySpec(id: category, types: [], actions: [])
            }
            byID[category]!.types.append(type.id ?? type.name)
            for action in type.actions where !byID[category]!.actions.contains(where: { $0.id == action.id }) {
                byID[category]!.actions.append(
                    ActionSpec(
                        id: action.id, title: action.title, authenticationRequired: action.authenticationRequired,
                        destructive: action.destructive, textInput: action.textInput))
            }
        }
        self.init(
            categories: order.map { byID[$0]! },
            types: catalog.types.map { TypeSpec(type: $0.name, id: $0.id, category: $0.category, stakes: $0.stakes) })
    }
}

extension TrackCatalog {
    /// `GET …/catalog/tracks?locale=`: every track with its steps as the catalog writes them and
    /// each step type's copy in `locale` (`fr-CA`, then `fr`, then the catalog's default), its
    /// placeholders left for the device to fill from the enrolment's data.
    init(catalog: Catalog, locale: String?) {
        self.init(
            tracks: catalog.tracks.map { track in
                var copy: [String: LocalTrack.Copy] = [:]
                for step in track.steps where copy[step.type] == nil {
                    guard let type = catalog.type(step.type),
                        let chosen = type.copy(locale: locale, defaultLocale: catalog.app.defaultLocale)
                    else { continue }
                    copy[step.type] = LocalTrack.Copy(
                        title: chosen.title ?? "", body: chosen.body ?? "", fallbackBody: type.fallbackBody,
                        deepLink: type.deepLink)
                }
                return LocalTrack(
                    name: track.name,
                    steps: track.steps.map { step in
                        LocalTrack.Step(
                            id: step.id, type: step.type, after: HeraldDuration.text(step.after),
                            at: step.at?.description,
                            data: step.data.isEmpty ? nil : step.data)
                    },
                    copy: copy)
            })
    }
}
