//! The few Node-API (N-API) calls the addon makes, declared by hand (`js_native_api.h`,
//! ABI-stable since Node 8), and safe helpers over them for one call's arguments and
//! results. The symbols are the running `node`'s own: the addon is linked with them
//! undefined and `process.dlopen` resolves them in the process that loads it.

use std::ffi::{c_char, c_void, CString};
use std::ptr;

/// `napi_env`: the JavaScript environment a call runs in.
pub type Env = *mut c_void;
/// `napi_value`: a handle to a JavaScript value, valid during the call.
pub type Value = *mut c_void;
/// `napi_callback_info`: the arguments of a call.
pub type CallbackInfo = *mut c_void;
/// `napi_callback`: a function JavaScript can call.
pub type Callback = unsafe extern "C" fn(Env, CallbackInfo) -> Value;

/// `napi_ok`.
const OK: i32 = 0;
/// `napi_undefined` and `napi_null` of `napi_valuetype`.
const UNDEFINED: i32 = 0;
const NULL: i32 = 1;

extern "C" {
    fn napi_get_cb_info(
        env: Env,
        info: CallbackInfo,
        argc: *mut usize,
        argv: *mut Value,
        this: *mut Value,
        data: *mut *mut c_void,
    ) -> i32;
    fn napi_create_function(
        env: Env,
        name: *const c_char,
        len: usize,
        cb: Callback,
        data: *mut c_void,
        result: *mut Value,
    ) -> i32;
    fn napi_set_named_property(env: Env, object: Value, name: *const c_char, value: Value) -> i32;
    fn napi_get_named_property(
        env: Env,
        object: Value,
        name: *const c_char,
        result: *mut Value,
    ) -> i32;
    fn napi_create_int32(env: Env, value: i32, result: *mut Value) -> i32;
    fn napi_get_value_int32(env: Env, value: Value, result: *mut i32) -> i32;
    fn napi_get_value_bool(env: Env, value: Value, result: *mut bool) -> i32;
    fn napi_get_buffer_info(env: Env, value: Value, data: *mut *mut c_void, len: *mut usize)
        -> i32;
    fn napi_is_buffer(env: Env, value: Value, result: *mut bool) -> i32;
    fn napi_create_buffer_copy(
        env: Env,
        len: usize,
        data: *const c_void,
        result_data: *mut *mut c_void,
        result: *mut Value,
    ) -> i32;
    fn napi_create_array_with_length(env: Env, len: usize, result: *mut Value) -> i32;
    fn napi_set_element(env: Env, array: Value, index: u32, value: Value) -> i32;
    fn napi_get_element(env: Env, array: Value, index: u32, result: *mut Value) -> i32;
    fn napi_get_array_length(env: Env, array: Value, result: *mut u32) -> i32;
    fn napi_is_array(env: Env, value: Value, result: *mut bool) -> i32;
    fn napi_get_value_string_utf8(
        env: Env,
        value: Value,
        buf: *mut c_char,
        size: usize,
        result: *mut usize,
    ) -> i32;
    fn napi_create_string_utf8(env: Env, s: *const c_char, len: usize, result: *mut Value) -> i32;
    fn napi_create_object(env: Env, result: *mut Value) -> i32;
    fn napi_get_null(env: Env, result: *mut Value) -> i32;
    fn napi_get_undefined(env: Env, result: *mut Value) -> i32;
    fn napi_get_boolean(env: Env, value: bool, result: *mut Value) -> i32;
    fn napi_throw_error(env: Env, code: *const c_char, msg: *const c_char) -> i32;
    fn napi_is_exception_pending(env: Env, result: *mut bool) -> i32;
    fn napi_typeof(env: Env, value: Value, result: *mut i32) -> i32;
}

/// A call's failure, thrown as a JavaScript `Error` whose `code` is `code`.
#[derive(Debug)]
pub struct Thrown {
    /// The error's `code` (an errno name such as `EAGAIN`, or `EINVAL` for bad arguments).
    pub code: String,
    /// Its message.
    pub message: String,
}

impl Thrown {
    /// A bad argument.
    pub fn invalid(message: &str) -> Thrown {
        Thrown {
            code: "EINVAL".to_owned(),
            message: message.to_owned(),
        }
    }
}

impl From<std::io::Error> for Thrown {
    fn from(e: std::io::Error) -> Thrown {
        Thrown {
            code: crate::errno_name(e.raw_os_error()),
            message: e.to_string(),
        }
    }
}

/// A call's result or its failure.
pub type Result<T> = std::result::Result<T, Thrown>;

/// One call from JavaScript: its environment and arguments.
#[derive(Debug)]
pub struct Call {
    env: Env,
    args: [Value; 8],
    argc: usize,
}

impl Call {
    /// The call `info` in `env`, with up to 8 arguments.
    ///
    /// # Safety
    /// `env` and `info` are the ones Node passed the running callback.
    pub unsafe fn new(env: Env, info: CallbackInfo) -> Call {
        let mut call = Call {
            env,
            args: [ptr::null_mut(); 8],
            argc: 8,
        };
        // SAFETY: `args` has room for `argc` values, as napi_get_cb_info requires.
        let status = unsafe {
            napi_get_cb_info(
                env,
                info,
                &mut call.argc,
                call.args.as_mut_ptr(),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        if status != OK {
            call.argc = 0;
        }
        call.argc = call.argc.min(8);
        call
    }

    fn arg(&self, i: usize) -> Result<Value> {
        if i < self.argc {
            Ok(self.args[i])
        } else {
            Err(Thrown::invalid("missing argument"))
        }
    }

    /// Argument `i` as a 32-bit integer.
    pub fn int(&self, i: usize) -> Result<i32> {
        let mut n = 0;
        // SAFETY: a live value of this call; the status says whether it was a number.
        if unsafe { napi_get_value_int32(self.env, self.arg(i)?, &mut n) } != OK {
            return Err(Thrown::invalid("expected a number"));
        }
        Ok(n)
    }

    /// Argument `i` as a boolean.
    pub fn bool(&self, i: usize) -> Result<bool> {
        let mut b = false;
        // SAFETY: a live value of this call; the status says whether it was a boolean.
        if unsafe { napi_get_value_bool(self.env, self.arg(i)?, &mut b) } != OK {
            return Err(Thrown::invalid("expected a boolean"));
        }
        Ok(b)
    }

    /// Argument `i` as bytes: a `Buffer`'s contents or a string's UTF-8.
    pub fn bytes(&self, i: usize) -> Result<Vec<u8>> {
        self.value_bytes(self.arg(i)?)
    }

    fn value_bytes(&self, v: Value) -> Result<Vec<u8>> {
        let mut is_buffer = false;
        // SAFETY: a live value of this call.
        unsafe { napi_is_buffer(self.env, v, &mut is_buffer) };
        if is_buffer {
            let mut data: *mut c_void = ptr::null_mut();
            let mut len = 0;
            // SAFETY: a Buffer's data pointer and length, valid during the call; copied at
            // once.
            unsafe {
                if napi_get_buffer_info(self.env, v, &mut data, &mut len) != OK {
                    return Err(Thrown::invalid("unreadable buffer"));
                }
                if len == 0 {
                    return Ok(Vec::new());
                }
                return Ok(std::slice::from_raw_parts(data.cast::<u8>(), len).to_vec());
            }
        }
        let mut len = 0;
        // SAFETY: a null buffer asks for the length only.
        if unsafe { napi_get_value_string_utf8(self.env, v, ptr::null_mut(), 0, &mut len) } != OK {
            return Err(Thrown::invalid("expected a string or a Buffer"));
        }
        let mut buf = vec![0u8; len + 1];
        // SAFETY: `buf` has room for the string and its NUL.
        unsafe {
            napi_get_value_string_utf8(self.env, v, buf.as_mut_ptr().cast(), buf.len(), &mut len)
        };
        buf.truncate(len);
        Ok(buf)
    }

    fn elements(&self, array: Value) -> Result<Vec<Value>> {
        let mut is_array = false;
        // SAFETY: a live value of this call.
        unsafe { napi_is_array(self.env, array, &mut is_array) };
        if !is_array {
            return Err(Thrown::invalid("expected an array"));
        }
        let mut len = 0;
        // SAFETY: a live array of this call.
        unsafe { napi_get_array_length(self.env, array, &mut len) };
        let mut out = Vec::with_capacity(len.min(4096) as usize);
        for i in 0..len {
            let mut v = ptr::null_mut();
            // SAFETY: an index below the array's length.
            if unsafe { napi_get_element(self.env, array, i, &mut v) } != OK {
                return Err(Thrown::invalid("unreadable array element"));
            }
            out.push(v);
        }
        Ok(out)
    }

    /// Argument `i`, an array, as byte strings.
    pub fn bytes_list(&self, i: usize) -> Result<Vec<Vec<u8>>> {
        self.elements(self.arg(i)?)?
            .into_iter()
            .map(|v| self.value_bytes(v))
            .collect()
    }

    /// Argument `i`, an array, as integers.
    pub fn int_list(&self, i: usize) -> Result<Vec<i32>> {
        self.elements(self.arg(i)?)?
            .into_iter()
            .map(|v| {
                let mut n = 0;
                // SAFETY: a live value of this call.
                if unsafe { napi_get_value_int32(self.env, v, &mut n) } != OK {
                    return Err(Thrown::invalid("expected numbers"));
                }
                Ok(n)
            })
            .collect()
    }

    /// Whether argument `i` is absent, `null` or `undefined`.
    pub fn is_nullish(&self, i: usize) -> bool {
        let Ok(v) = self.arg(i) else { return true };
        let mut kind = 0;
        // SAFETY: a live value of this call.
        unsafe { napi_typeof(self.env, v, &mut kind) };
        kind == UNDEFINED || kind == NULL
    }

    /// Property `name` of argument `i`, an object, as an integer; `None` when absent or
    /// not a number.
    pub fn int_prop(&self, i: usize, name: &str) -> Option<i32> {
        let v = self.prop(i, name)?;
        let mut n = 0;
        // SAFETY: a live value of this call.
        (unsafe { napi_get_value_int32(self.env, v, &mut n) } == OK).then_some(n)
    }

    /// Property `name` of argument `i`, an object, as a boolean (`false` when absent).
    pub fn bool_prop(&self, i: usize, name: &str) -> bool {
        let Some(v) = self.prop(i, name) else {
            return false;
        };
        let mut b = false;
        // SAFETY: a live value of this call.
        unsafe { napi_get_value_bool(self.env, v, &mut b) == OK && b }
    }

    /// Property `name` of argument `i`, an array of integers (empty when absent).
    pub fn int_list_prop(&self, i: usize, name: &str) -> Vec<i32> {
        let Some(v) = self.prop(i, name) else {
            return Vec::new();
        };
        let Ok(items) = self.elements(v) else {
            return Vec::new();
        };
        items
            .into_iter()
            .filter_map(|v| {
                let mut n = 0;
                // SAFETY: a live value of this call.
                (unsafe { napi_get_value_int32(self.env, v, &mut n) } == OK).then_some(n)
            })
            .collect()
    }

    fn prop(&self, i: usize, name: &str) -> Option<Value> {
        let object = self.arg(i).ok()?;
        let name = CString::new(name).ok()?;
        let mut v = ptr::null_mut();
        // SAFETY: a live value of this call and a NUL-terminated name.
        (unsafe { napi_get_named_property(self.env, object, name.as_ptr(), &mut v) } == OK)
            .then_some(v)
    }

    /// A JavaScript number.
    pub fn int_value(&self, n: i32) -> Value {
        let mut v = ptr::null_mut();
        // SAFETY: creating a value in this call's environment.
        unsafe { napi_create_int32(self.env, n, &mut v) };
        v
    }

    /// A JavaScript boolean.
    pub fn bool_value(&self, b: bool) -> Value {
        let mut v = ptr::null_mut();
        // SAFETY: creating a value in this call's environment.
        unsafe { napi_get_boolean(self.env, b, &mut v) };
        v
    }

    /// `null`.
    pub fn null(&self) -> Value {
        let mut v = ptr::null_mut();
        // SAFETY: a singleton of this call's environment.
        unsafe { napi_get_null(self.env, &mut v) };
        v
    }

    /// `undefined`.
    pub fn undefined(&self) -> Value {
        let mut v = ptr::null_mut();
        // SAFETY: a singleton of this call's environment.
        unsafe { napi_get_undefined(self.env, &mut v) };
        v
    }

    /// A JavaScript string of `s`.
    pub fn string(&self, s: &str) -> Value {
        let mut v = ptr::null_mut();
        // SAFETY: `s` is valid UTF-8 of the given length.
        unsafe { napi_create_string_utf8(self.env, s.as_ptr().cast(), s.len(), &mut v) };
        v
    }

    /// A new `Buffer` holding a copy of `data`.
    pub fn buffer(&self, data: &[u8]) -> Value {
        let mut v = ptr::null_mut();
        let mut out = ptr::null_mut();
        // SAFETY: `data` is readable for its length; Node copies it.
        unsafe {
            napi_create_buffer_copy(self.env, data.len(), data.as_ptr().cast(), &mut out, &mut v)
        };
        v
    }

    /// A JavaScript array of `items`.
    pub fn array(&self, items: &[Value]) -> Value {
        let mut a = ptr::null_mut();
        // SAFETY: creating and filling an array in this call's environment.
        unsafe {
            napi_create_array_with_length(self.env, items.len(), &mut a);
            for (i, &v) in items.iter().enumerate() {
                napi_set_element(self.env, a, i as u32, v);
            }
        }
        a
    }

    /// A JavaScript object with `fields`.
    pub fn object(&self, fields: &[(&str, Value)]) -> Value {
        let mut o = ptr::null_mut();
        // SAFETY: creating an object in this call's environment.
        unsafe { napi_create_object(self.env, &mut o) };
        for (name, v) in fields {
            if let Ok(name) = CString::new(*name) {
                // SAFETY: a live object, a NUL-terminated name and a live value.
                unsafe { napi_set_named_property(self.env, o, name.as_ptr(), *v) };
            }
        }
        o
    }

    /// The callback's return value for `result`: the value, or `undefined` after
    /// throwing the failure.
    pub fn finish(&self, result: Result<Value>) -> Value {
        match result {
            Ok(v) => v,
            Err(t) => {
                let mut pending = false;
                // SAFETY: a query of this call's environment.
                unsafe { napi_is_exception_pending(self.env, &mut pending) };
                if !pending {
                    let code = CString::new(t.code).unwrap_or_default();
                    let message = CString::new(t.message.replace('\0', " ")).unwrap_or_default();
                    // SAFETY: two NUL-terminated strings, copied by Node.
                    unsafe { napi_throw_error(self.env, code.as_ptr(), message.as_ptr()) };
                }
                self.undefined()
            }
        }
    }
}

/// Sets `exports[name]` to a function calling `cb`.
///
/// # Safety
/// `env` and `exports` are the ones Node passed the module's registration.
pub unsafe fn export(env: Env, exports: Value, name: &str, cb: Callback) {
    let Ok(cname) = CString::new(name) else {
        return;
    };
    let mut f = ptr::null_mut();
    // SAFETY: per the contract, a live environment and exports object; the name is
    // NUL-terminated and copied.
    unsafe {
        if napi_create_function(env, cname.as_ptr(), name.len(), cb, ptr::null_mut(), &mut f) == OK
        {
            napi_set_named_property(env, exports, cname.as_ptr(), f);
        }
    }
}
