//! The table itself: its creation (tests and local runs) and the paged query of one Region's items.

use super::{Keys, MAX_QUERY_PAGES};
use crate::client::store_error;
use crate::codec::{Item, HEADER_SK, KEPT_PREFIX};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;
use shareplane_store::StoreError;

pub(super) async fn query_items(
    client: &Client,
    table: &str,
    name: &str,
    consistent: bool,
    keys: Keys,
) -> Result<Vec<Item>, StoreError> {
    let mut items = Vec::new();
    let mut start = None;
    for _ in 0..MAX_QUERY_PAGES {
        let query = client
            .query()
            .table_name(table)
            .expression_attribute_values(":p", AttributeValue::S(name.to_string()));
        let query = match keys {
            Keys::Current => query
                .key_condition_expression("pk = :p AND begins_with(sk, :r)")
                .expression_attribute_values(":r", AttributeValue::S(HEADER_SK.to_string())),
            Keys::WithKept => query
                .key_condition_expression("pk = :p AND sk BETWEEN :lo AND :hi")
                .expression_attribute_values(":lo", AttributeValue::S(KEPT_PREFIX.to_string()))
                .expression_attribute_values(":hi", AttributeValue::S(format!("{HEADER_SK}$"))),
        };
        let page = query
            .consistent_read(consistent)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| store_error("Query", e))?;
        items.extend(page.items.unwrap_or_default());
        start = page.last_evaluated_key;
        if start.is_none() {
            return Ok(items);
        }
    }
    Err(StoreError::Fatal(format!(
        "Region {name}'s items span more than {MAX_QUERY_PAGES} pages"
    )))
}

/// Creates the table (on-demand, `pk`/`sk` strings) if it does not exist. For tests and local
/// runs; production tables come from the infrastructure code, with the same key schema.
pub async fn create_table(client: &Client, table: &str) -> Result<(), StoreError> {
    let attr = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(|e| StoreError::Fatal(e.to_string()))
    };
    let key_el = |name: &str, t: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(t)
            .build()
            .map_err(|e| StoreError::Fatal(e.to_string()))
    };
    let result = client
        .create_table()
        .table_name(table)
        .attribute_definitions(attr("pk")?)
        .attribute_definitions(attr("sk")?)
        .key_schema(key_el("pk", KeyType::Hash)?)
        .key_schema(key_el("sk", KeyType::Range)?)
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await;
    match result {
        Ok(_) => Ok(()),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_in_use_exception()) =>
        {
            Ok(())
        }
        Err(e) => Err(store_error("CreateTable", e)),
    }
}
