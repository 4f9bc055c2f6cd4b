import Foundation
import HeraldAPI
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldStore
import Hummingbird
import Logging

/// The composer: a catalog type or a plain alert to a few users, previewed per
/// device as the provider would get it (and its size against the limit), then sent or scheduled
/// through the same path as `POST …/notifications`, and followed on the notification's page.
extension Dashboard {
    /// How many users one composition may name (a campaign to everyone is the API's `to.all`).
    static let composerMaximumUsers = 100
    /// How many devices a preview shows.
    static let previewMaximumDevices = 50

    static func addComposerRoutes(to router: Router<HeraldRequestContext>, runtime: HeraldRuntime) {
        router.get("/dashboard/apps/:app/compose") { request, context in
            try await withApp(request, context, runtime) { session, app in
                var form = ComposeForm()
                form.userIDs = request.uri.queryParameters.get("user_id") ?? ""
                return composePage(form, previews: nil, error: nil, session: session, app: app, status: .ok)
            }
        }
        router.post("/dashboard/apps/:app/compose") { request, context in
            try await withApp(request, context, runtime) { session, app in
                let fields = try await form(request)
                guard checkCSRF(fields, session) else { return csrfRefused() }
                let form = ComposeForm(fields)
                do {
                    let send = try form.sendRequest()
                    if fields["action"] == "send" {
                        let accepted = try await NotificationSends.accept(send, app: app, runtime: runtime)
                        let id = accepted.record.id.uuidString.lowercased()
                        runtime.logger.notice(
                            "Dashboard send",
                            metadata: [
                                "herald.app": "\(app.id)", "herald.notification": "\(id)",
                                "herald.devices": "\(accepted.record.recipients)",
                                "herald.dashboard.role": "\(describe(session.role))", "herald.peer": "\(context.peer)",
                            ])
                        return redirect("/dashboard/apps/\(escaped(app.id))/notifications/\(id)")
                    }
                    let previews = try await SendPreviews.preview(
                        send, app: app, runtime: runtime, maximumDevices: previewMaximumDevices)
                    return composePage(form, previews: previews, error: nil, session: session, app: app, status: .ok)
                } catch let error as CompositionError {
                    let message = "\(ComposeForm.label(of: error.field)): \(error.message)"
                    return composePage(
                        form, previews: nil, error: message, session: session, app: app, status: .badRequest)
                } catch let error as RenderingError {
                    return composePage(
                        form, previews: nil, error: error.message, session: session, app: app, status: .badRequest)
                }
            }
        }
    }

    static func composePage(
        _ form: ComposeForm, previews: [SendPreview]?, error: String?, session: DashboardSession,
        app: AppRuntime,
        status: HTTPResponse.Status
    ) -> Response {
        let types = (app.catalog?.types ?? []).map {
            NotificationsPage.Option(
                name: $0.name, selected: $0.name == form.type || ($0.id != nil && $0.id == form.type))
        }
        let view = ComposePage(
            app: app.id, csrf: session.csrf, types: types, form: form, error: error, previewed: previews != nil,
            devices: previews ?? [], maximumUsers: composerMaximumUsers)
        var response = render("Compose", "compose", view, session: session, app: app.id, tab: "compose")
        response.status = status
        return response
    }
}
