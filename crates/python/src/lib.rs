//! `vramscope._native`: the Python package's binding of the application layer
//! (`vramscope::app`). Its functions, each releasing the GIL while Rust works:
//! - `call_json(command, input_json) -> str`: one command of the JSON façade (the same
//!   functions the CLI's `--json` and the web server call), its answer as JSON text;
//! - `analyze_bytes(data, name_hint=None) -> str`: `analyze` of a record held in memory;
//! - `compare_bytes(input_json, data, name_hint="measurement") -> str`: `compare` of a job and
//!   a measurement held in memory;
//! - `job_with_keywords(job_json, keywords_json) -> str`: keyword arguments laid over a job,
//!   each a job field or `vramscope estimate`'s flag of that name;
//! - `cli_main(argv) -> int`: the whole CLI, in process, returning its exit code.
//!
//! Bad input raises `vramscope._native.VramscopeError(message, exit_code)`, `message` being the
//! CLI's one-line cause (what follows `error: `); the Python package maps it to
//! `vramscope.InputError`.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use vramscope::app::Session;

create_exception!(
    _native,
    VramscopeError,
    PyException,
    "A command refused its input: args = (message, exit_code), message being the CLI's one-line cause."
);

/// The façade's error as the Python exception, carrying the message and the exit code.
fn to_py(e: vramscope::app::AppError) -> PyErr {
    let message = vramscope::app::escape_controls(&e.message).into_owned();
    VramscopeError::new_err((message, e.exit_code))
}

/// Each call's own session: no fetch flags, no model held; nothing one call did (an earlier
/// `cli_main(["--refresh", ...])` included) changes how the next resolves MODEL.
fn session() -> Session {
    Session::default()
}

/// Runs one command of the application layer on a JSON input and returns its JSON answer.
#[pyfunction]
fn call_json(py: Python<'_>, command: &str, input_json: &str) -> PyResult<String> {
    py.detach(|| vramscope::app::call_json(&session(), command, input_json))
        .map_err(to_py)
}

/// Analyzes a PyTorch memory record held in memory (snapshot pickle, profiler timeline, Chrome
/// trace, engine log, OOM message); `name_hint` is what error messages call it
/// (`measurement` when none). Returns the JSON answer, as `analyze FILE --json` prints it.
#[pyfunction]
#[pyo3(signature = (data, name_hint = None))]
fn analyze_bytes(py: Python<'_>, data: &[u8], name_hint: Option<&str>) -> PyResult<String> {
    py.detach(|| {
        let measured = vramscope::app::analyze_bytes(data, name_hint)?;
        vramscope::app::to_json(&measured)
    })
    .map_err(to_py)
}

/// `compare` of a job (`{"job": JOB}`) and a measurement held in memory; `name_hint` is what
/// error messages call the measurement. Returns the JSON answer, as `compare --json` prints it.
#[pyfunction]
#[pyo3(signature = (input_json, data, name_hint = "measurement"))]
fn compare_bytes(
    py: Python<'_>,
    input_json: &str,
    data: &[u8],
    name_hint: &str,
) -> PyResult<String> {
    py.detach(|| vramscope::app::compare_bytes_json(&session(), input_json, data, name_hint))
        .map_err(to_py)
}

/// Lays keyword arguments (a JSON object) over a job (JSON): a keyword naming a job field is
/// that field, any other is `vramscope estimate`'s flag of that name, read as the flag is.
#[pyfunction]
fn job_with_keywords(py: Python<'_>, job_json: &str, keywords_json: &str) -> PyResult<String> {
    py.detach(|| vramscope::app::job_with_keywords_json(job_json, keywords_json))
        .map_err(to_py)
}

/// Runs the command line in process (`argv[0]` is the program name) and returns its exit code.
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<String>) -> i32 {
    py.detach(move || vramscope::cli_main(argv))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("VramscopeError", m.py().get_type::<VramscopeError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(call_json, m)?)?;
    m.add_function(wrap_pyfunction!(analyze_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(compare_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(job_with_keywords, m)?)?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    Ok(())
}
