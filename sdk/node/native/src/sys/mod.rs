//! The addon's unsafe edge: the Node-API declarations and the helpers over them
//! ([`napi`]), the callbacks Node calls ([`callbacks!`]), and the module's registration.

pub mod napi;

/// Defines `FUNCTIONS`, the module's functions as `(name, callback)`: one Node-API
/// callback per safe function `fn(&Call) -> Result<Value>`, which turns its `Err` into a
/// thrown `Error`.
macro_rules! callbacks {
    ($($js:literal => $f:ident),* $(,)?) => {
        /// The module's functions: `(name, callback)`.
        const FUNCTIONS: &[(&str, $crate::sys::napi::Callback)] = &[
            $(($js, {
                unsafe extern "C" fn cb(
                    env: $crate::sys::napi::Env,
                    info: $crate::sys::napi::CallbackInfo,
                ) -> $crate::sys::napi::Value {
                    // SAFETY: Node calls this with the environment and the call's info.
                    let call = unsafe { $crate::sys::napi::Call::new(env, info) };
                    let result = $f(&call);
                    call.finish(result)
                }
                cb
            })),*
        ];
    };
}
pub(crate) use callbacks;

/// The module's registration, which Node looks up by this name in an addon that did
/// not register itself.
///
/// # Safety
/// Called by Node with a live environment and exports object.
#[no_mangle]
pub unsafe extern "C" fn napi_register_module_v1(
    env: napi::Env,
    exports: napi::Value,
) -> napi::Value {
    for &(name, cb) in crate::FUNCTIONS {
        // SAFETY: the environment and exports Node passed this registration.
        unsafe { napi::export(env, exports, name, cb) };
    }
    exports
}
