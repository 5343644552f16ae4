//! The API's OpenAPI 3.0 description, generated from [`crate::endpoint::ALL`] and the
//! request and answer types (their JSON schemas come from `schemars`), so that it cannot drift
//! from what the host serves. The host serves it at
//! [`OPENAPI_PATH`](crate::endpoint::OPENAPI_PATH); `docs/openapi.json` is a copy that a test
//! keeps current.

use serde_json::{Map, Value, json};

use crate::endpoint::{ALL, METRICS_PATH, Method};
use crate::error::ErrorKind;
use crate::types::ErrorBody;

/// The OpenAPI document (JSON).
pub fn document() -> Value {
    let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
    let error = generator.subschema_for::<ErrorBody>().to_value();
    let mut paths = Map::new();
    for e in ALL {
        let mut op = Map::new();
        op.insert("operationId".into(), json!(e.name));
        op.insert("summary".into(), json!(e.summary));
        if e.method == Method::Post {
            op.insert(
                "requestBody".into(),
                json!({
                    "required": true,
                    "content": {"application/json": {"schema": (e.request)(&mut generator).to_value()}}
                }),
            );
        }
        let mut responses = Map::new();
        responses.insert(
            "200".into(),
            json!({
                "description": "Done.",
                "content": {"application/json": {"schema": (e.response)(&mut generator).to_value()}}
            }),
        );
        for (kind, what) in [
            (ErrorKind::BadInput, "The request is wrong; the message says what and where."),
            (ErrorKind::Unauthorized, "A token is required and missing or wrong."),
            (ErrorKind::NotFound, "The thing asked for does not exist."),
            (ErrorKind::Conflict, "Lost a race too many times; running it again may succeed."),
            (ErrorKind::Store, "The store failed."),
            (ErrorKind::Unavailable, "The host is shutting down."),
        ] {
            responses.insert(
                kind.http_status().to_string(),
                json!({"description": what, "content": {"application/json": {"schema": error}}}),
            );
        }
        for (status, what) in [
            (403, "Refused: the Host header names no loopback address on a loopback listener."),
            (413, "The request body is larger than the limit."),
            (415, "A POST without `Content-Type: application/json`."),
        ] {
            if status != 415 || e.method == Method::Post {
                responses.insert(
                    status.to_string(),
                    json!({"description": what, "content": {"application/json": {"schema": error}}}),
                );
            }
        }
        op.insert("responses".into(), Value::Object(responses));
        let method = e.method.as_str().to_ascii_lowercase();
        paths.insert(e.path.into(), json!({ method: op }));
    }
    paths.insert(
        METRICS_PATH.into(),
        json!({"get": {
            "operationId": "metrics",
            "summary": "The store's and the observers' counters, histograms and gauges in the Prometheus text format 0.0.4.",
            "responses": {"200": {"description": "Prometheus text.", "content": {"text/plain": {"schema": {"type": "string"}}}}}
        }}),
    );
    let mut schemas = Value::Object(generator.take_definitions(true));
    let mut paths = Value::Object(paths);
    without_tuples(&mut schemas);
    without_tuples(&mut paths);
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "percolator host API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The local HTTP API of a running `percolator up`. JSON in and out; every error answers {\"error\": \"...\"}. \
                On a loopback listener the Host header must name loopback; when a token is configured every request \
                sends `Authorization: Bearer <token>`."
        },
        "servers": [{"url": "http://127.0.0.1:7878"}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}
        },
        "security": [{}, {"bearer": []}]
    })
}

/// Rewrites the tuples of a JSON schema for OpenAPI 3.0, which has none: `items` must be one
/// schema, so an `items` list (schemars' tuple, e.g. a load record's `[column, value]`)
/// becomes `items: {"anyOf": [...]}`, the list's schemas in any position; `minItems` and
/// `maxItems` stay, and which item is which is for the field's description to say.
fn without_tuples(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(Value::Array(tuple)) = m.get_mut("items") {
                let any_of = std::mem::take(tuple);
                m.insert("items".into(), json!({ "anyOf": any_of }));
            }
            m.values_mut().for_each(without_tuples);
        }
        Value::Array(a) => a.iter_mut().for_each(without_tuples),
        _ => {}
    }
}

/// [`document`], pretty-printed with a final newline (the form of `docs/openapi.json`).
pub fn pretty() -> String {
    let mut text = serde_json::to_string_pretty(&document()).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_endpoint_is_described_with_resolvable_references() {
        let doc = document();
        for e in ALL {
            let op = &doc["paths"][e.path][e.method.as_str().to_ascii_lowercase()];
            assert_eq!(op["operationId"], e.name, "{e:?}");
            assert!(op["responses"]["200"].is_object(), "{e:?}");
        }
        // Every $ref points at a schema of components/schemas.
        fn refs(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::Object(m) => {
                    if let Some(Value::String(r)) = m.get("$ref") {
                        out.push(r.clone());
                    }
                    m.values().for_each(|v| refs(v, out));
                }
                Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
                _ => {}
            }
        }
        let mut all = Vec::new();
        refs(&doc, &mut all);
        assert!(!all.is_empty());
        for r in all {
            let name = r.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("{r}"));
            assert!(doc["components"]["schemas"][name].is_object(), "{r} does not resolve");
        }
    }

    /// OpenAPI 3.0 schemas are not JSON Schema: `items` is one schema, never a list (a tuple).
    #[test]
    fn tuples_are_described_as_openapi_3_0_allows() {
        fn lists_of_items(v: &Value, at: &str, out: &mut Vec<String>) {
            match v {
                Value::Object(m) => {
                    if m.get("items").is_some_and(Value::is_array) {
                        out.push(at.to_owned());
                    }
                    m.iter().for_each(|(k, v)| lists_of_items(v, &format!("{at}/{k}"), out));
                }
                Value::Array(a) => a.iter().enumerate().for_each(|(i, v)| lists_of_items(v, &format!("{at}/{i}"), out)),
                _ => {}
            }
        }
        let doc = document();
        let mut found = Vec::new();
        lists_of_items(&doc, "", &mut found);
        assert!(found.is_empty(), "`items` lists at {found:?}");
        let pair = &doc["components"]["schemas"]["LoadRecord"]["properties"]["cells"]["items"];
        assert_eq!((pair["minItems"].as_u64(), pair["maxItems"].as_u64()), (Some(2), Some(2)), "{pair}");
        assert_eq!(pair["items"]["anyOf"][0]["type"], "string", "{pair}");
    }

    #[test]
    fn optional_fields_are_not_required() {
        let doc = document();
        let required = |schema: &str| -> Vec<String> {
            doc["components"]["schemas"][schema]["required"]
                .as_array()
                .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
                .unwrap_or_default()
        };
        assert_eq!(required("ScanRequest"), ["table"]);
        assert!(required("WaitRequest").is_empty());
    }

    /// `docs/openapi.json` is what the code generates (regenerate it with
    /// `PERCOLATOR_BLESS=1 cargo test -p percolator-api`).
    #[test]
    fn the_published_copy_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
        let now = pretty();
        if std::env::var_os("PERCOLATOR_BLESS").is_some() {
            std::fs::write(&path, &now).unwrap();
        }
        let published = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            published == now,
            "{} is out of date: regenerate it with `PERCOLATOR_BLESS=1 cargo test -p percolator-api`",
            path.display()
        );
    }
}
