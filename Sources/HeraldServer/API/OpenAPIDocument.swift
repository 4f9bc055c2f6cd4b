/// The OpenAPI 3.1 description served at `/openapi.yaml`; it lists exactly the routes `HeraldAPI` serves.
package enum OpenAPIDocument {
    package static let yaml = #"""
        openapi: 3.1.0
        info:
          title: Herald
          version: 0.1.0
          description: >-
            Self-hosted push notifications. Every /v1 route needs the header Authorization: Bearer <key>
            (the admin key, an app's server key, or its client key where a route says so). With a client key
            and client_registration verified (the default), device registration also needs X-Herald-User-Token:
            a JWT (HS256) the app's backend signs with apps[].user_token_secret, sub = the user id, exp at
            most 24 h ahead.
        components:
          securitySchemes:
            bearer: { type: http, scheme: bearer }
          schemas:
            Error:
              type: object
              required: [error]
              properties:
                error:
                  type: object
                  required: [code, message]
                  properties:
                    code: { type: string }
                    message: { type: string }
                    field: { type: string }
            DeviceInput:
              type: object
              required: [device_id, user_id, token]
              properties:
                device_id: { type: string, minLength: 1, maxLength: 256 }
                user_id: { type: string, minLength: 1, maxLength: 256 }
                platform: { type: string, enum: [apns, fcm], default: apns }
                token: { type: string, minLength: 1, maxLength: 4096 }
                environment:
                  type: string
                  enum: [production, sandbox]
                  description: Default the app's apns.environment on creation; left out on update, the stored one is kept.
                name: { type: string, maxLength: 256 }
                model: { type: string, maxLength: 256 }
                locale: { type: string, maxLength: 35 }
                time_zone: { type: string }
                app_version: { type: string, maxLength: 64 }
                authorization_status: { type: string, enum: [not_determined, denied, authorized, provisional, ephemeral] }
            Device:
              allOf:
                - $ref: '#/components/schemas/DeviceInput'
                - type: object
                  required: [active, created_at, updated_at]
                  properties:
                    active: { type: boolean }
                    inactive_reason: { type: string }
                    inactive_since: { type: string, format: date-time }
                    created_at: { type: string, format: date-time }
                    updated_at: { type: string, format: date-time }
            NotificationInput:
              type: object
              required: [to]
              properties:
                to:
                  type: object
                  properties:
                    user_ids: { type: array, items: { type: string }, minItems: 1, maxItems: 10000 }
                    device_ids: { type: array, items: { type: string }, minItems: 1, maxItems: 10000 }
                    all: { type: boolean }
                exclude_device_ids: { type: array, items: { type: string }, maxItems: 10000 }
                alert:
                  type: object
                  properties:
                    title: { type: string }
                    subtitle: { type: string }
                    body: { type: string }
                data: { type: object, description: "Nested at most 16 levels deep." }
                push_type:
                  type: string
                  enum: [alert, background, voip, complication, fileprovider, liveactivity, location, mdm, pushtotalk, widgets, controls]
                  description: >-
                    voip, complication, fileprovider, liveactivity, location, pushtotalk, widgets and controls need a
                    token registered for that push type and are refused (400) until devices can register one.
                priority: { type: integer, enum: [1, 5, 10] }
                collapse_id: { type: string, maxLength: 64 }
                thread_id: { type: string }
                category: { type: string }
                badge: { type: integer, minimum: 0 }
                sound: { type: string }
                content_available: { type: boolean }
                mutable_content: { type: boolean }
                interruption_level: { type: string, enum: [passive, active, time-sensitive, critical] }
                relevance_score: { type: number, minimum: 0, maximum: 1 }
                expiration: { type: integer, minimum: 0 }
                deliver_at: { type: string, format: date-time, description: "At most a year ahead." }
                idempotency_key: { type: string, minLength: 1, maxLength: 256 }
                cancel_key:
                  type: string
                  minLength: 1
                  maxLength: 128
                  description: POST /v1/apps/{app}/cancel with this key cancels the deliveries not yet sent.
                android:
                  type: object
                  description: FCM only. channel_id defaults to the catalog type's or app's android_channel.
                  properties:
                    channel_id: { type: string, minLength: 1, maxLength: 256 }
                    image: { type: string, maxLength: 2048, description: "an http(s) URL: notification.image" }
                type:
                  type: string
                  description: >-
                    A catalog type (name or external id such as PN-02). Copy is rendered per device locale
                    (fr-CA, fr, then the default) from data; category, thread, collapse id, deep link, sound and
                    interruption level come from the type unless given here; the policy engine decides per
                    device whether it is sent now, deferred or suppressed. data may not use the keys type,
                    deep_link or group_summary.
            NotificationAccepted:
              type: object
              required: [id, recipients, duplicate]
              properties:
                id: { type: string, format: uuid }
                recipients: { type: integer }
                duplicate: { type: boolean }
            Notification:
              type: object
              required: [id, created_at, recipients, counts, deliveries]
              properties:
                id: { type: string, format: uuid }
                created_at: { type: string, format: date-time }
                recipients: { type: integer }
                counts:
                  type: object
                  properties:
                    queued: { type: integer }
                    sent: { type: integer }
                    failed: { type: integer }
                    deferred: { type: integer }
                    suppressed: { type: integer }
                    cancelled: { type: integer }
                cancel_key: { type: string }
                deliveries:
                  type: array
                  items:
                    type: object
                    required: [id, device_id, status, apns_id, attempts, created_at, updated_at]
                    properties:
                      id: { type: integer, description: "The delivery's id: its payload's herald.d." }
                      device_id: { type: string }
                      status: { type: string, enum: [queued, sent, failed, deferred, suppressed, cancelled] }
                      reason: { type: string }
                      apns_id: { type: string, format: uuid }
                      attempts: { type: integer }
                      until: { type: string, format: date-time }
                      created_at: { type: string, format: date-time }
                      updated_at: { type: string, format: date-time }
                      trace:
                        description: The policy engine's decision trace, every step that changed the outcome.
                        type: array
                        items:
                          type: object
                          required: [rule, message, at]
                          properties:
                            rule: { type: string, enum: [preference, vacation, quiet_hours, pacing, grouping, dnd, pii, size, schedule, sync] }
                            message: { type: string }
                            at: { type: string, format: date-time }
            Enrolment:
              type: object
              required: [track, anchor_at, enrolled_at, steps]
              properties:
                enrolled: { type: boolean, description: "PUT only: false when the user was enrolled already (nothing changed)." }
                track: { type: string }
                anchor_at: { type: string, format: date-time }
                enrolled_at: { type: string, format: date-time }
                test_seconds: { type: integer }
                steps:
                  type: array
                  items:
                    type: object
                    required: [id, due_at, status]
                    properties:
                      id: { type: string }
                      type: { type: string }
                      due_at: { type: string, format: date-time }
                      local_time: { type: string, description: "The due time in the user's zone, e.g. 2026-11-27T10:00:00 Europe/Paris." }
                      status: { type: string, enum: [pending, firing, fired, skipped, cancelled, failed] }
                      reason: { type: string }
                      notification_id: { type: string, format: uuid }
                      trace: { type: array, items: { type: object } }
            TestSend:
              type: object
              required: [id, user_id, type, complete, deliveries]
              properties:
                id: { type: string, format: uuid }
                user_id: { type: string }
                type: { type: string }
                complete: { type: boolean, description: Every delivery has its answer. }
                deliveries:
                  type: array
                  items:
                    type: object
                    required: [delivery_id, device_id, status, attempts]
                    properties:
                      delivery_id: { type: integer }
                      device_id: { type: string }
                      platform: { type: string, enum: [apns, fcm] }
                      status: { type: string, enum: [queued, sent, failed, deferred, suppressed, cancelled] }
                      reason: { type: string }
                      attempts: { type: integer }
                      until: { type: string, format: date-time }
                      trace: { type: array, items: { type: object } }
                      headers: { type: object, additionalProperties: { type: string } }
                      payload: { type: object }
            Response:
              type: object
              required: [id, notification_id, device_id, created_at]
              properties:
                id: { type: string, format: uuid }
                notification_id: { type: string, format: uuid }
                user_id: { type: [string, "null"] }
                device_id: { type: string }
                text: { type: [string, "null"] }
                energy: { type: [integer, "null"] }
                mood: { type: [integer, "null"] }
                focus: { type: [integer, "null"] }
                created_at: { type: string, format: date-time }
            ActionCommit:
              type: object
              required: [status, delivery_id, action, result, replay]
              properties:
                status: { type: string, enum: [committed, queued, failed] }
                delivery_id: { type: integer }
                action: { type: string }
                result: { description: "The backend's answer (JSON, or text), once it answered." }
                replay: { type: boolean }
            Badge:
              type: object
              required: [badge, counters]
              properties:
                badge: { type: integer }
                counters: { type: object, additionalProperties: { type: integer } }
                notification_id: { type: string, format: uuid, description: "The badge push, when the total changed." }
            EventInput:
              type: object
              required: [name, user_id]
              properties:
                name: { type: string, minLength: 1, maxLength: 128 }
                user_id: { type: string, minLength: 1, maxLength: 256 }
                data: { type: object }
                occurred_at: { type: string, format: date-time, description: "In the last year, at most 5 minutes ahead; default now." }
                idempotency_key: { type: string, minLength: 1, maxLength: 256 }
            EventAccepted:
              type: object
              required: [id, notifications, duplicate]
              properties:
                id: { type: string }
                notifications: { type: array, items: { type: string, format: uuid } }
                duplicate: { type: boolean }
            UserInput:
              type: object
              properties:
                time_zone: { type: string }
                locale: { type: string, minLength: 1, maxLength: 35 }
                attributes: { type: object, description: "Nested at most 16 levels deep." }
            User:
              type: object
              required: [user_id, attributes, created_at, updated_at]
              properties:
                user_id: { type: string }
                time_zone: { type: string }
                locale: { type: string }
                attributes: { type: object }
                created_at: { type: string, format: date-time }
                updated_at: { type: string, format: date-time }
            Preferences:
              type: object
              properties:
                types: { type: object, additionalProperties: { type: boolean } }
                quiet_hours:
                  type: object
                  required: [enabled]
                  properties:
                    enabled: { type: boolean }
                    start: { type: string, pattern: '^[0-2][0-9]:[0-5][0-9]$' }
                    end: { type: string, pattern: '^[0-2][0-9]:[0-5][0-9]$' }
                vacation: { type: boolean }
                dnd_bypass: { type: object, additionalProperties: { type: boolean } }
            Health:
              type: object
              description: >-
                Without the admin or metrics key only status is given; with it, everything below.
              required: [status]
              properties:
                status: { type: string, enum: [ok, unhealthy] }
                problems: { type: array, items: { type: string } }
                database: { type: string, enum: [writable, unwritable] }
                dispatcher:
                  type: object
                  required: [due]
                  properties:
                    last_batch_at: { type: string, format: date-time }
                    due: { type: integer }
                providers_paused:
                  type: array
                  items:
                    type: object
                    required: [platform, reason, since, retry_at]
                    properties:
                      app: { type: string, description: "Only with the admin or metrics key." }
                      platform: { type: string, enum: [apns, fcm] }
                      reason: { type: string }
                      since: { type: string, format: date-time }
                      retry_at: { type: string, format: date-time }
          parameters:
            app: { name: app, in: path, required: true, schema: { type: string } }
            userToken:
              name: X-Herald-User-Token
              in: header
              required: false
              description: >-
                With a client key (and client_registration verified): a user token, a JWT (HS256) signed with
                apps[].user_token_secret whose sub is the user the call acts for. Ignored with server and admin keys.
              schema: { type: string, maxLength: 4096, pattern: '^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$' }
            user_id: { name: user_id, in: path, required: true, schema: { type: string, minLength: 1 } }
          responses:
            Error:
              description: A problem with the request, naming the field.
              content: { application/json: { schema: { $ref: '#/components/schemas/Error' } } }
        security: [{ bearer: [] }]
        paths:
          /livez:
            get:
              security: [{}]
              summary: The process answers (no I/O); for a liveness probe.
              responses:
                '200': { description: Alive., content: { application/json: { schema: { type: object, required: [status], properties: { status: { type: string, enum: [ok] } } } } } }
          /readyz:
            get:
              security: [{}, { bearer: [] }]
              summary: 503 when the database refuses writes or work is due 60 s without a finished batch; computed at most once a second.
              responses:
                '200': { description: "Ready (paused providers are listed for the operator).", content: { application/json: { schema: { $ref: '#/components/schemas/Health' } } } }
                '503': { description: "Not ready: problems says why (to the operator).", content: { application/json: { schema: { $ref: '#/components/schemas/Health' } } } }
          /healthz:
            get:
              security: [{}, { bearer: [] }]
              summary: The same as /readyz.
              responses:
                '200': { description: "Ready (paused providers are listed for the operator).", content: { application/json: { schema: { $ref: '#/components/schemas/Health' } } } }
                '503': { description: "Not ready: problems says why (to the operator).", content: { application/json: { schema: { $ref: '#/components/schemas/Health' } } } }
          /dashboard/login:
            get:
              security: [{}]
              summary: The dashboard's sign-in page (HTML); sets the login form's token cookie.
              responses:
                '200': { description: The page., content: { text/html: { schema: { type: string } } } }
            post:
              security: [{}]
              summary: Signs in to the dashboard with the admin key or an app's server key (at least 32 characters).
              description: >-
                The form's csrf field must be the token of the login page's cookie. Failed sign-ins are
                throttled per client address and in all (429 with Retry-After).
              requestBody:
                required: true
                content:
                  application/x-www-form-urlencoded:
                    schema:
                      type: object
                      properties:
                        csrf: { type: string }
                        key: { type: string }
              responses:
                '303': { description: Signed in; the session cookie is set. }
                '400': { description: The form is not valid percent-encoded UTF-8., content: { application/json: { schema: { $ref: '#/components/schemas/Error' } } } }
                '401': { description: Not a dashboard key (the page again)., content: { text/html: { schema: { type: string } } } }
                '403': { description: The form's token is missing or wrong (the page again)., content: { text/html: { schema: { type: string } } } }
                '413': { $ref: '#/components/responses/Error' }
                '415': { $ref: '#/components/responses/Error' }
                '429': { description: Too many failed sign-ins; Retry-After says how long to wait., content: { text/html: { schema: { type: string } } } }
          /dashboard/logout:
            post:
              security: [{}]
              summary: Signs out (the session cookie and the form's csrf field).
              requestBody:
                required: true
                content:
                  application/x-www-form-urlencoded:
                    schema: { type: object, properties: { csrf: { type: string } } }
              responses:
                '303': { description: Signed out, or not signed in (to the sign-in page). }
                '400': { $ref: '#/components/responses/Error' }
                '403': { description: The form's CSRF token is missing or wrong., content: { text/html: { schema: { type: string } } } }
                '413': { $ref: '#/components/responses/Error' }
                '415': { $ref: '#/components/responses/Error' }
          /dashboard/apps/{app}/compose:
            post:
              security: [{}]
              summary: Previews or sends a notification from the dashboard's composer (session cookie and CSRF token).
              parameters: [{ $ref: '#/components/parameters/app' }]
              requestBody:
                required: true
                content:
                  application/x-www-form-urlencoded:
                    schema:
                      type: object
                      properties:
                        csrf: { type: string }
                        action: { type: string, enum: [preview, send] }
                        type: { type: string }
                        title: { type: string }
                        body: { type: string }
                        data: { type: string }
                        user_ids: { type: string }
                        deliver_at: { type: string }
                        cancel_key: { type: string }
              responses:
                '200': { description: The composer with its preview., content: { text/html: { schema: { type: string } } } }
                '303': { description: Sent (to the notification's page), or not signed in (to the sign-in page). }
                '400': { description: A field is wrong (the page names it)., content: { text/html: { schema: { type: string } } } }
                '403': { description: The form's CSRF token is missing or wrong., content: { text/html: { schema: { type: string } } } }
                '404': { description: No such app for this session., content: { text/html: { schema: { type: string } } } }
                '413': { $ref: '#/components/responses/Error' }
                '415': { $ref: '#/components/responses/Error' }
          /metrics:
            get:
              summary: Prometheus metrics (admin key or metrics_key).
              responses:
                '200': { description: Prometheus metrics., content: { text/plain: { schema: { type: string } } } }
                '401': { $ref: '#/components/responses/Error' }
          /openapi.yaml:
            get:
              security: []
              responses:
                '200': { description: This document., content: { application/yaml: { schema: { type: string } } } }
          /v1/dev/clock:
            post:
              summary: Moves the server's clock forward (only under herald serve --dev or clock manual; 404 otherwise). Admin key.
              requestBody:
                required: true
                content:
                  application/json:
                    schema:
                      type: object
                      required: [advance]
                      properties:
                        advance: { type: string, pattern: '^([0-9]{1,3}[smhd]){1,3}$', description: "A duration: 30s, 15m, 48h, 2d, 1h30m; more than 0, at most 366d, the clock at most 3650d past its start." }
              responses:
                '200':
                  description: The clock after the move.
                  content:
                    application/json:
                      schema:
                        type: object
                        required: [now, advanced_seconds]
                        properties:
                          now: { type: string, format: date-time }
                          advanced_seconds: { type: number }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/devices:
            post:
              summary: Register or update a device by device_id (admin, server or client key; a client key needs X-Herald-User-Token).
              parameters: [{ $ref: '#/components/parameters/app' }, { $ref: '#/components/parameters/userToken' }]
              requestBody: { required: true, content: { application/json: { schema: { $ref: '#/components/schemas/DeviceInput' } } } }
              responses:
                '200': { description: Updated., content: { application/json: { schema: { $ref: '#/components/schemas/Device' } } } }
                '201': { description: Created., content: { application/json: { schema: { $ref: '#/components/schemas/Device' } } } }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { description: "The user token is another user's (user_id), or the device is another user's (device_id).", content: { application/json: { schema: { $ref: '#/components/schemas/Error' } } } }
                '404': { $ref: '#/components/responses/Error' }
                '429': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/devices/import:
            post:
              summary: Bulk upsert from JSON lines (one DeviceInput per line), streamed.
              parameters: [{ $ref: '#/components/parameters/app' }]
              requestBody: { required: true, content: { application/x-ndjson: { schema: { type: string } }, text/plain: { schema: { type: string } } } }
              responses:
                '200': { description: Imported., content: { application/json: { schema: { type: object, properties: { imported: { type: integer } } } } } }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/devices/{device_id}:
            delete:
              summary: Unregister a device (logout). A client key needs the user token of the device's user.
              parameters:
                - { $ref: '#/components/parameters/app' }
                - { $ref: '#/components/parameters/userToken' }
                - { name: device_id, in: path, required: true, schema: { type: string, minLength: 1, maxLength: 256 } }
              responses:
                '204': { description: Gone. }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/users/{user_id}/devices:
            get:
              summary: A user's devices, oldest first, a page at a time.
              parameters:
                - { $ref: '#/components/parameters/app' }
                - { name: user_id, in: path, required: true, schema: { type: string } }
                - { name: limit, in: query, required: false, schema: { type: integer, minimum: 1, maximum: 1000, default: 100 } }
                - { name: cursor, in: query, required: false, description: "next_cursor of the page before", schema: { type: string } }
              responses:
                '200': { description: "The devices; next_cursor when there are more.", content: { application/json: { schema: { type: object, properties: { devices: { type: array, items: { $ref: '#/components/schemas/Device' } }, next_cursor: { type: string } } } } } }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/catalog/categories:
            get:
              summary: The categories and actions to register on the device (client key allowed).
              parameters: [{ $ref: '#/components/parameters/app' }]
              responses:
                '200':
                  description: The categories.
                  content:
                    application/json:
                      schema:
                        type: object
                        properties:
                          categories:
                            type: array
                            items:
                              type: object
                              properties:
                                id: { type: string }
                                types: { type: array, items: { type: string } }
                                actions:
                                  type: array
                                  items:
                                    type: object
                                    properties:
                                      id: { type: string }
                                      title: { type: string }
                                      authentication_required: { type: boolean }
                                      destructive: { type: boolean }
                                      text_input: { type: boolean }
                          types:
                            type: array
                            items:
                              type: object
                              properties:
                                type: { type: string }
                                id: { type: [string, "null"] }
                                category: { type: [string, "null"] }
                                stakes: { type: string, enum: [low, medium, high, failure] }
                '401': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/catalog/tracks:
            get:
              summary: The lifecycle tracks with each step type's copy in one locale, for HeraldKit's LocalTrackScheduler (client key allowed).
              parameters:
                - { $ref: '#/components/parameters/app' }
                - { name: locale, in: query, required: false, description: "The device's locale (fr-CA); then its language, then the catalog's default.", schema: { type: string } }
              responses:
                '200':
                  description: The tracks.
                  content:
                    application/json:
                      schema:
                        type: object
                        properties:
                          tracks:
                            type: array
                            items:
                              type: object
                              properties:
                                name: { type: string }
                                steps:
                                  type: array
                                  items:
                                    type: object
                                    properties:
                                      id: { type: string }
                                      type: { type: string }
                                      after: { type: string, description: "After the anchor: 2d, 36h, 90m." }
                                      at: { type: string, description: "HH:MM in the user's zone, when the step is wall-clock." }
                                      data: { type: object, additionalProperties: { type: string } }
                                copy:
                                  type: object
                                  additionalProperties:
                                    type: object
                                    properties:
                                      title: { type: string }
                                      body: { type: string }
                                      fallback_body: { type: string }
                                      deep_link: { type: string }
                '401': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/users/{user_id}:
            put:
              summary: Create or update a user's time zone, locale and attributes.
              parameters: [{ $ref: '#/components/parameters/app' }, { $ref: '#/components/parameters/user_id' }]
              requestBody: { required: true, content: { application/json: { schema: { $ref: '#/components/schemas/UserInput' } } } }
              responses:
                '200': { description: The user., content: { application/json: { schema: { $ref: '#/components/schemas/User' } } } }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
            get:
              summary: A user.
              parameters: [{ $ref: '#/components/parameters/app' }, { $ref: '#/components/parameters/user_id' }]
              responses:
                '200': { description: The user., content: { application/json: { schema: { $ref: '#/components/schemas/User' } } } }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/users/{user_id}/preferences:
            put:
              summary: Replace a user's notification preferences.
              parameters: [{ $ref: '#/components/parameters/app' }, { $ref: '#/components/parameters/user_id' }]
              requestBody: { required: true, content: { application/json: { schema: { $ref: '#/components/schemas/Preferences' } } } }
              responses:
                '200': { description: The stored preferences., content: { application/json: { schema: { $ref: '#/components/schemas/Preferences' } } } }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
            get:
              summary: A user's notification preferences (empty when never set).
              parameters: [{ $ref: '#/components/parameters/app' }, { $ref: '#/components/parameters/user_id' }]
              responses:
                '200': { description: The preferences., content: { application/json: { schema: { $ref: '#/components/schemas/Preferences' } } } }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/users/{user_id}/tracks/{track}:
            put:
              summary: Enrol a user in a lifecycle track of the app's catalog (idempotent).
              description: >-
                The steps are planned from anchor_at (default now): a step with at fires on the calendar day after
                reaches, at that time in the user's time zone (re-planned when it changes); the others at anchor_at
                plus after. Enrolled already: nothing changes (enrolled false) unless on_conflict is restart, which
                cancels what has not been sent and plans anew. test_seconds fires every step that many seconds
                apart from now. Steps fan out to the user's devices when they fire; a step due more than a minute
                before now is skipped.
              parameters:
                - { $ref: '#/components/parameters/app' }
                - { $ref: '#/components/parameters/user_id' }
                - { name: track, in: path, required: true, schema: { type: string, minLength: 1 } }
              requestBody:
                required: true
                content:
                  application/json:
                    schema:
                      type: object
                      properties:
                        anchor_at: { type: string, format: date-time, description: "Within a year of now." }
                        data: { type: object, description: "Fills the steps' placeholders over the catalog's data defaults." }
                        on_conflict: { type: string, enum: [ignore, restart], default: ignore }
                        test_seconds: { type: integer, minimum: 1, maximum: 86400 }
              responses:
                '200': { description: The enrolment., content: { application/json: { schema: { $ref: '#/components/schemas/Enrolment' } } } }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
            delete:
              summary: Take a user out of a track; its steps not fired and their deliveries not sent are cancelled.
              parameters:
                - { $ref: '#/components/parameters/app' }
                - { $ref: '#/components/parameters/user_id' }
                - { name: track, in: path, required: true, schema: { type: string, minLength: 1 } }
              responses:
                '200':
                  description: What was cancelled (steps plus deliveries).
                  content:
                    application/json:
                      schema:
                        type: object
                        required: [cancelled, steps, deliveries, in_flight]
                        properties:
                          cancelled: { type: integer }
                          steps: { type: integer }
                          deliveries: { type: integer }
                          in_flight: { type: integer }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/tracks/{track}/enrolments:
            post:
              summary: Bulk enrolment from JSON lines ({"user_id", "anchor_at", "data"} per line, as PUT with on_conflict ignore), streamed.
              parameters:
                - { $ref: '#/components/parameters/app' }
                - { name: track, in: path, required: true, schema: { type: string, minLength: 1 } }
              requestBody: { required: true, content: { application/x-ndjson: { schema: { type: string } }, text/plain: { schema: { type: string } } } }
              responses:
                '200':
                  description: Enrolled now, and lines whose user was enrolled already.
                  content:
                    application/json:
                      schema: { type: object, required: [enrolled, already], properties: { enrolled: { type: integer }, already: { type: integer } } }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/users/{user_id}/tracks:
            get:
              summary: A user's track enrolments, every step with its due time (UTC and local) and status.
              parameters: [{ $ref: '#/components/parameters/app' }, { $ref: '#/components/parameters/user_id' }]
              responses:
                '200':
                  description: The enrolments.
                  content:
                    application/json:
                      schema:
                        type: object
                        required: [tracks]
                        properties:
                          tracks: { type: array, items: { $ref: '#/components/schemas/Enrolment' } }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/users/{user_id}/badges:
            post:
              summary: Change one of a user's badge counters; a changed total is pushed (absolute) to every device.
              parameters: [{ $ref: '#/components/parameters/app' }, { $ref: '#/components/parameters/user_id' }]
              requestBody:
                required: true
                content:
                  application/json:
                    schema:
                      type: object
                      required: [counter]
                      properties:
                        counter: { type: string, minLength: 1, maxLength: 64 }
                        delta: { type: integer, minimum: -1000000, maximum: 1000000 }
                        value: { type: integer, minimum: 0, maximum: 1000000 }
              responses:
                '200': { description: The badge after., content: { application/json: { schema: { $ref: '#/components/schemas/Badge' } } } }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
            get:
              summary: A user's badge (the sum of their counters) and counters.
              parameters: [{ $ref: '#/components/parameters/app' }, { $ref: '#/components/parameters/user_id' }]
              responses:
                '200': { description: The badge., content: { application/json: { schema: { $ref: '#/components/schemas/Badge' } } } }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/users/{user_id}/sync:
            post:
              summary: A background push with a cursor to the user's other devices, coalesced and within each device's hourly budget.
              parameters: [{ $ref: '#/components/parameters/app' }, { $ref: '#/components/parameters/user_id' }]
              requestBody:
                required: true
                content:
                  application/json:
                    schema:
                      type: object
                      required: [cursor]
                      properties:
                        origin_device_id: { type: string, minLength: 1, maxLength: 256 }
                        cursor: { type: string, minLength: 1, maxLength: 1024 }
              responses:
                '202':
                  description: Scheduled, per other device.
                  content:
                    application/json:
                      schema:
                        type: object
                        required: [devices]
                        properties:
                          devices:
                            type: array
                            items:
                              type: object
                              required: [device_id, due_at, coalesced, held]
                              properties:
                                device_id: { type: string }
                                due_at: { type: string, format: date-time }
                                coalesced: { type: boolean }
                                held: { type: boolean }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/events:
            post:
              summary: Record what users did (one event, or {"events":[…]} up to 1,000).
              description: app.opened is built in, what a track step's unless reads.
              parameters: [{ $ref: '#/components/parameters/app' }]
              requestBody:
                required: true
                content:
                  application/json:
                    schema:
                      oneOf:
                        - { $ref: '#/components/schemas/EventInput' }
                        - type: object
                          required: [events]
                          properties:
                            events: { type: array, minItems: 1, maxItems: 1000, items: { $ref: '#/components/schemas/EventInput' } }
              responses:
                '202':
                  description: Stored.
                  content:
                    application/json:
                      schema:
                        oneOf:
                          - { $ref: '#/components/schemas/EventAccepted' }
                          - type: object
                            required: [events]
                            properties:
                              events: { type: array, items: { $ref: '#/components/schemas/EventAccepted' } }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
                '413': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/notifications:
            post:
              summary: Send a notification to users, devices or everyone (server or admin key).
              parameters: [{ $ref: '#/components/parameters/app' }]
              requestBody: { required: true, content: { application/json: { schema: { $ref: '#/components/schemas/NotificationInput' } } } }
              responses:
                '202': { description: Stored; delivery follows., content: { application/json: { schema: { $ref: '#/components/schemas/NotificationAccepted' } } } }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
                '413': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/notifications/{id}:
            get:
              summary: Delivery status counts and per-device status.
              parameters:
                - { $ref: '#/components/parameters/app' }
                - { name: id, in: path, required: true, schema: { type: string } }
                - { name: limit, in: query, schema: { type: integer, minimum: 1, maximum: 10000, default: 1000 } }
                - { name: offset, in: query, schema: { type: integer, minimum: 0, default: 0 } }
              responses:
                '200': { description: The notification., content: { application/json: { schema: { $ref: '#/components/schemas/Notification' } } } }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/cancel:
            post:
              summary: Cancels every delivery not yet sent of the app's notifications with a cancel key.
              description: >-
                One transaction: every notification accepted before it (answered 202 before the cancel was
                asked) is covered whole, none accepted after it. A delivery not yet claimed for sending is never
                sent (status cancelled); one being sent as the cancel commits is in flight: it ends sent or failed
                as its attempt ends, or cancelled if it would have been tried again. user_ids narrows the cancel
                to those users' deliveries; a notification to all devices is only cancelled whole.
              parameters:
                - { $ref: '#/components/parameters/app' }
              requestBody:
                required: true
                content:
                  application/json:
                    schema:
                      type: object
                      required: [cancel_key]
                      properties:
                        cancel_key: { type: string, minLength: 1, maxLength: 128 }
                        user_ids: { type: array, items: { type: string, minLength: 1, maxLength: 256 }, minItems: 1, maxItems: 10000 }
              responses:
                '200':
                  description: What was cancelled.
                  content:
                    application/json:
                      schema:
                        type: object
                        required: [cancelled, in_flight, broadcasts_skipped, steps]
                        properties:
                          cancelled: { type: integer, description: "Deliveries and track steps that will never be sent." }
                          steps: { type: integer, description: "Of them, track steps (their cancel key) not yet fired." }
                          in_flight: { type: integer }
                          broadcasts_skipped: { type: integer }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/opened:
            post:
              summary: A device reports that a delivery was opened (tapped, or one of its actions chosen); one open per delivery counts.
              description: >-
                Server key, or a client key with the X-Herald-User-Token of the delivery's user. delivery_id is the
                payload's herald.d. The first report counts (analytics, by the day the notification was sent) and
                is the built-in app.opened event; later ones only add to reports. A delivery being sent has its row
                once its provider answered: until then the answer is 404, and the report may be sent again.
              parameters: [{ $ref: '#/components/parameters/app' }]
              requestBody:
                required: true
                content:
                  application/json:
                    schema:
                      type: object
                      required: [delivery_id, device_id]
                      properties:
                        delivery_id: { type: integer, minimum: 1 }
                        device_id: { type: string, minLength: 1, maxLength: 256 }
                        action: { type: string, minLength: 1, maxLength: 64, default: default }
                        at: { type: string, format: date-time }
              responses:
                '200':
                  description: Recorded.
                  content:
                    application/json:
                      schema:
                        type: object
                        required: [delivery_id, counted, reports, action]
                        properties:
                          delivery_id: { type: integer }
                          counted: { type: boolean, description: "True for the first report of the delivery." }
                          reports: { type: integer }
                          action: { type: string, description: "The action the first report gave." }
                          event_id: { type: string }
                          notifications: { type: array, items: { type: string } }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
                '429': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/actions:
            post:
              summary: Commit a quick action from the lock screen with the token its delivery's payload carried (herald.a); no key.
              description: >-
                The token is the capability: signed by Herald for one delivery and one action, valid 7 days (or until
                the notification expires). The first commit of a delivery is kept; the same token again answers it
                (replay: true); another action of the same delivery is 409. The commit goes to the app's webhook
                (apps[].webhook, Standard Webhooks signatures, Idempotency-Key delivery:action): answered by the
                backend within its timeout → 200 with its answer as result; otherwise 202 queued, retried after 5 s,
                5 min, 30 min, 2 h, 5 h, 10 h and 10 h, in order per user, until a 2xx or a webhook-delivery: abort.
              parameters: [{ $ref: '#/components/parameters/app' }]
              requestBody:
                required: true
                content:
                  application/json:
                    schema:
                      type: object
                      required: [token, device_id]
                      properties:
                        token: { type: string, maxLength: 200 }
                        device_id: { type: string, minLength: 1, maxLength: 256 }
                        turn_id: { type: string, minLength: 1, maxLength: 128 }
                        text: { type: string, maxLength: 1000 }
              responses:
                '200': { description: Committed (or failed for good)., content: { application/json: { schema: { $ref: '#/components/schemas/ActionCommit' } } } }
                '202': { description: Queued for the webhook's retries., content: { application/json: { schema: { $ref: '#/components/schemas/ActionCommit' } } } }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
                '413': { $ref: '#/components/responses/Error' }
                '409': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/notifications/{id}/resolve:
            post:
              summary: The user dealt with a notification on one device; the other devices get a replacement saying so.
              description: >-
                Server key, or a client key with the user token of the device's user. The user's deliveries of it not yet
                sent are cancelled; the user's other active devices get label as a visible alert with the same collapse id
                (the notification's, or its id for a type with actions; FCM tag), no category (no actions) and
                content-available. The first resolution stays: a second answers it (first false). A committed quick action
                resolves its notification the same way, with its catalog label (resolved: "✓ Approved on {device}").
              parameters:
                - { $ref: '#/components/parameters/app' }
                - { name: id, in: path, required: true, schema: { type: string } }
              requestBody:
                required: true
                content:
                  application/json:
                    schema:
                      type: object
                      required: [device_id, label]
                      properties:
                        device_id: { type: string, minLength: 1, maxLength: 256 }
                        label: { type: string, minLength: 1, maxLength: 178 }
              responses:
                '200':
                  description: The resolution.
                  content:
                    application/json:
                      schema:
                        type: object
                        required: [first, device_id, label, cancelled, devices, resolved_at]
                        properties:
                          first: { type: boolean }
                          device_id: { type: string }
                          label: { type: string }
                          cancelled: { type: integer }
                          devices: { type: integer }
                          replacement_id: { type: [string, "null"] }
                          resolved_at: { type: string, format: date-time }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
                '429': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/notifications/{id}/responses:
            post:
              summary: Store the user's response to a notification (text, energy, mood, focus 1–10).
              description: Server key, or a client key with the user token of the device's user. At least one of the fields.
              parameters:
                - { $ref: '#/components/parameters/app' }
                - { name: id, in: path, required: true, schema: { type: string } }
              requestBody:
                required: true
                content:
                  application/json:
                    schema:
                      type: object
                      required: [device_id]
                      properties:
                        device_id: { type: string, minLength: 1, maxLength: 256 }
                        text: { type: string, minLength: 1, maxLength: 1000 }
                        energy: { type: integer, minimum: 1, maximum: 10 }
                        mood: { type: integer, minimum: 1, maximum: 10 }
                        focus: { type: integer, minimum: 1, maximum: 10 }
              responses:
                '201': { description: Stored., content: { application/json: { schema: { $ref: '#/components/schemas/Response' } } } }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
                '429': { $ref: '#/components/responses/Error' }
            get:
              summary: A notification's responses, oldest first.
              parameters:
                - { $ref: '#/components/parameters/app' }
                - { name: id, in: path, required: true, schema: { type: string } }
                - { name: limit, in: query, schema: { type: integer, minimum: 1, maximum: 1000, default: 100 } }
              responses:
                '200':
                  description: The responses.
                  content:
                    application/json:
                      schema:
                        type: object
                        required: [responses]
                        properties:
                          responses: { type: array, items: { $ref: '#/components/schemas/Response' } }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/test:
            post:
              summary: Send one typed notification to a user's devices now, and answer what each was sent and how it went.
              description: >-
                Server key. Rendered per device as any send of the type, and sent at once: quiet hours and pacing do not
                hold it (its trace starts with the rule "test"), preferences, vacation and the guards still do. Waits up
                to 10 s for the providers' answers (200; 202 with what is known by then). A test send is not counted in
                the type's analytics nor for the user's pacing. `payload` is what went to the provider (APNs payload with
                `headers`; FCM's request body), for deliveries this node sent.
              parameters:
                - { $ref: '#/components/parameters/app' }
              requestBody:
                required: true
                content:
                  application/json:
                    schema:
                      type: object
                      required: [user_id, type]
                      properties:
                        user_id: { type: string, minLength: 1, maxLength: 256 }
                        type: { type: string, description: A catalog type's name or id. }
                        data: { type: object, description: The type's placeholders. }
              responses:
                '200': { description: Every device answered., content: { application/json: { schema: { $ref: '#/components/schemas/TestSend' } } } }
                '202': { description: Some answers are still awaited., content: { application/json: { schema: { $ref: '#/components/schemas/TestSend' } } } }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/audit:
            get:
              summary: Quick-action commits, newest first; who, device, action, turn id, status, result, latency.
              parameters:
                - { $ref: '#/components/parameters/app' }
                - { name: user_id, in: query, schema: { type: string, minLength: 1, maxLength: 256 } }
                - { name: since, in: query, schema: { type: string, format: date-time }, description: "Default: 30 days ago." }
                - { name: limit, in: query, schema: { type: integer, minimum: 1, maximum: 1000, default: 100 } }
              responses:
                '200':
                  description: The commits.
                  content:
                    application/json:
                      schema:
                        type: object
                        required: [commits]
                        properties:
                          commits: { type: array, items: { type: object } }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/webhooks/replay:
            post:
              summary: Send again, from their first try, the app's webhook messages created since a time that are no longer pending.
              parameters: [{ $ref: '#/components/parameters/app' }]
              requestBody:
                required: true
                content:
                  application/json:
                    schema:
                      type: object
                      required: [since]
                      properties:
                        since: { type: string, format: date-time }
              responses:
                '200':
                  description: How many were queued again.
                  content:
                    application/json:
                      schema:
                        type: object
                        required: [replayed]
                        properties:
                          replayed: { type: integer }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
          /v1/apps/{app}/analytics:
            get:
              summary: Sent, accepted, opened and click-through rate per type against its goal, by day of sending; the opt-in rate.
              description: >-
                Counted by the day (UTC) each notification was sent or scheduled for. sent = accepted + failed;
                ctr = opened ÷ accepted (opened once per delivery). A type with a goal_ctr and at least 200 sends
                below its goal shows below_goal. Opt-in: authorized + provisional ÷ the active devices that reported
                a permission, overall, per platform and per app version.
              parameters:
                - { $ref: '#/components/parameters/app' }
                - { name: from, in: query, schema: { type: string, format: date }, description: "First day (default: 29 days before to)." }
                - { name: to, in: query, schema: { type: string, format: date }, description: "Last day (default: today, UTC); at most 366 days." }
                - { name: type, in: query, schema: { type: string }, description: "One type, by name or id." }
              responses:
                '200':
                  description: The analytics.
                  content:
                    application/json:
                      schema:
                        type: object
                        required: [from, to, types, opt_in]
                        properties:
                          from: { type: string, format: date }
                          to: { type: string, format: date }
                          types:
                            type: array
                            items:
                              type: object
                              required: [type, sent, accepted, failed, suppressed, deferred, cancelled, opened, ctr, goal_met, below_goal, days]
                              properties:
                                type: { type: string }
                                id: { type: [string, "null"] }
                                sent: { type: integer }
                                accepted: { type: integer }
                                failed: { type: integer }
                                suppressed: { type: integer }
                                deferred: { type: integer }
                                cancelled: { type: integer }
                                opened: { type: integer }
                                ctr: { type: [number, "null"] }
                                goal_ctr: { type: [number, "null"] }
                                goal_met: { type: [boolean, "null"] }
                                below_goal: { type: boolean }
                                days: { type: array, items: { type: object } }
                          opt_in:
                            type: object
                            required: [opted_in, reported, rate, statuses, platforms, app_versions]
                            properties:
                              rate: { type: [number, "null"] }
                              opted_in: { type: integer }
                              reported: { type: integer }
                              statuses: { type: object, additionalProperties: { type: integer } }
                              platforms: { type: array, items: { type: object } }
                              app_versions: { type: array, items: { type: object } }
                '400': { $ref: '#/components/responses/Error' }
                '401': { $ref: '#/components/responses/Error' }
                '403': { $ref: '#/components/responses/Error' }
                '404': { $ref: '#/components/responses/Error' }
        """#
}
