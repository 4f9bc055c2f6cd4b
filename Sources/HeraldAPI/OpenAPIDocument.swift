/// The OpenAPI 3.1 description served at `/openapi.yaml` (`Resources/openapi.yaml`, compiled
/// into the binary); it lists exactly the routes `HeraldAPI` serves (a test compares the two).
package enum OpenAPIDocument {
    package static let yaml = String(decoding: PackageResources.openapi_yaml, as: UTF8.self)
}
