//! `omnigraph`: the command line over an OmniGraph root.
//!
//! Today it checks schema files (`omnigraph schema check FILE`); the graph commands
//! (init, load, query, search, optimize…) arrive with the publication layer.

use clap::{Parser, Subcommand};
use omnigraph_core::schema::{self, Catalog};
use omnigraph_core::{EXIT_SUCCESS, OmniError};
use std::process::ExitCode;

/// OmniGraph: typed property graphs kept as Lance tables, published by exact CAS.
#[derive(Parser)]
#[command(name = "omnigraph", version, about, long_about = None)]
struct Cli {
    /// Print one JSON document on stdout and nothing else there.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Schema files in the `.pg` language.
    #[command(subcommand)]
    Schema(SchemaCommand),
}

#[derive(Subcommand)]
enum SchemaCommand {
    /// Check a schema file and show its tables, columns, indexes and content hash.
    Check {
        /// The `.pg` file.
        file: std::path::PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match &cli.command {
        Command::Schema(SchemaCommand::Check { file }) => schema_check(file, cli.json),
    };
    match outcome {
        Ok(()) => ExitCode::from(EXIT_SUCCESS as u8),
        Err(error) => report(&error, cli.json),
    }
}

fn schema_check(file: &std::path::Path, json: bool) -> Result<(), OmniError> {
    let name = file.display().to_string();
    let text = std::fs::read_to_string(file).map_err(|error| {
        OmniError::bad_input(
            omnigraph_core::InputLocation::in_source(&name),
            format!("cannot read the schema file: {error}"),
        )
    })?;
    let catalog = schema::parse(&name, &text)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&catalog_json(&catalog)).unwrap_or_default()
        );
    } else {
        print_catalog(&catalog);
    }
    Ok(())
}

fn catalog_json(catalog: &Catalog) -> serde_json::Value {
    let types: Vec<serde_json::Value> = catalog
        .types()
        .iter()
        .map(|type_def| {
            serde_json::json!({
                "name": type_def.name(),
                "kind": if type_def.is_node() { "node" } else { "edge" },
                "key": type_def.key_column(),
                "columns": type_def.columns().iter().map(|column| serde_json::json!({
                    "name": column.name,
                    "type": column.data_type.to_pg(),
                    "nullable": column.nullable,
                })).collect::<Vec<_>>(),
                "indexes": type_def.declared_indexes().iter().map(|index| serde_json::json!({
                    "name": index.name,
                    "column": index.column,
                    "kind": index.kind.suffix(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::json!({ "hash": catalog.hash(), "types": types })
}

fn print_catalog(catalog: &Catalog) {
    println!("schema {}", catalog.hash());
    for type_def in catalog.types() {
        let kind = if type_def.is_node() { "node" } else { "edge" };
        println!(
            "\n{kind} {} (key {})",
            type_def.name(),
            type_def.key_column()
        );
        let width = type_def
            .columns()
            .iter()
            .map(|column| column.name.len())
            .max()
            .unwrap_or(0);
        for column in type_def.columns() {
            let optional = if column.nullable { "?" } else { "" };
            println!(
                "  {:width$}  {}{optional}",
                column.name,
                column.data_type.to_pg()
            );
        }
        for index in type_def.declared_indexes() {
            println!(
                "  index {} on {} ({})",
                index.name,
                index.column,
                index.kind.suffix()
            );
        }
    }
}

/// Prints the error's code, message and evidence on stderr (as JSON with `--json`) and
/// returns the exit code from the core error table.
fn report(error: &OmniError, json: bool) -> ExitCode {
    let code = error.code();
    if json {
        let document = serde_json::json!({
            "error": {
                "code": code.code,
                "message": error.to_string(),
                "evidence": error.evidence(),
            }
        });
        eprintln!("{document}");
    } else {
        eprintln!("error[{}]: {error}", code.code);
        eprintln!("evidence: {}", error.evidence());
    }
    ExitCode::from(code.exit_code as u8)
}
