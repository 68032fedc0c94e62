use nu_plugin::{serve_plugin, MsgPackSerializer};

fn main() {
    serve_plugin(&nu_plugin_nsyskit::NsyskitPlugin, MsgPackSerializer)
}
