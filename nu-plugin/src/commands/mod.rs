//! One module per command. Each mirrors its binary's flags and calls the same library function.

use nu_plugin::PluginCommand;

use crate::NsyskitPlugin;

mod from_nsyskit;

pub use from_nsyskit::FromNsyskit;

/// Every command of the plugin.
pub fn all() -> Vec<Box<dyn PluginCommand<Plugin = NsyskitPlugin>>> {
    vec![Box::new(FromNsyskit)]
}
