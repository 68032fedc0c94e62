//! `nu_plugin_nsyskit`: every nsyskit tool as a Nushell command of the same name.
//!
//! Each command calls the same library function as its binary (no logic here, no subprocess) and turns the
//! document into a typed Nushell value ([`convert`]). A RETRY verdict is data; only nsyskit errors (exit 2 of
//! a binary) become `LabeledError`s, pointing at the offending argument ([`call::labeled`]).

// Every plugin command returns Nushell's own `ShellError` (about 192 bytes); boxing it would only add
// conversions at each call of the nu-plugin API.
#![allow(clippy::result_large_err)]

pub mod call;
pub mod commands;
pub mod convert;
pub mod flags;

use nu_plugin::{Plugin, PluginCommand};

/// The plugin: `plugin add nu_plugin_nsyskit; plugin use nsyskit`.
pub struct NsyskitPlugin;

impl Plugin for NsyskitPlugin {
    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").into()
    }

    fn commands(&self) -> Vec<Box<dyn PluginCommand<Plugin = Self>>> {
        commands::all()
    }
}
