//! The OpenAPI document, generated from the route handlers and their request types
//! (utoipa), and served at `/openapi.json`. A test compares its paths with the route
//! table the router is built from, both ways.

use crate::routes::{branches, export, health, history, maintenance, query, schema, writes};
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "OmniGraph",
        description = "Typed property graphs served over HTTP: Cypher queries, writes, branches, history and maintenance. Every error body is {\"error\": {code, message, evidence}} (docs/errors.md).",
    ),
    paths(
        health::healthz,
        health::readyz,
        health::openapi,
        query::query,
        export::export,
        writes::insert,
        writes::load,
        writes::update,
        writes::delete,
        schema::show,
        schema::apply,
        branches::list,
        branches::create,
        branches::delete,
        branches::merge,
        history::commits,
        history::tables,
        history::status,
        maintenance::optimize,
        maintenance::cleanup,
        maintenance::run,
        maintenance::cancel,
    ),
    modifiers(&BearerTokens),
    security(("bearer" = [])),
)]
struct Document;

/// Every route takes `Authorization: Bearer <token>` (`omnigraph token add`).
struct BearerTokens;

impl utoipa::Modify for BearerTokens {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The OpenAPI document of every route.
pub fn document() -> utoipa::openapi::OpenApi {
    Document::openapi()
}

/// Every (method, path) the document lists, methods in lowercase.
pub fn operations() -> Vec<(String, String)> {
    let document = document();
    let mut operations = Vec::new();
    for (path, item) in &document.paths.paths {
        let methods = [
            ("get", item.get.is_some()),
            ("post", item.post.is_some()),
            ("put", item.put.is_some()),
            ("delete", item.delete.is_some()),
            ("patch", item.patch.is_some()),
        ];
        for (method, present) in methods {
            if present {
                operations.push((method.to_owned(), path.clone()));
            }
        }
    }
    operations.sort();
    operations
}

#[cfg(test)]
mod tests {
    use super::operations;
    use crate::routes::ROUTES;

    #[test]
    fn the_document_lists_every_route_and_only_them() {
        let mut routes: Vec<(String, String)> = ROUTES
            .iter()
            .map(|(method, path)| ((*method).to_owned(), (*path).to_owned()))
            .collect();
        routes.sort();
        assert_eq!(operations(), routes);
    }
}
