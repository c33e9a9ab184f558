"""Type stubs of the native module (crates/python, PyO3)."""

__version__: str

class VramscopeError(Exception):
    """A command refused its input; ``args == (message, exit_code)``."""

def call_json(command: str, input_json: str) -> str:
    """Runs one command of the application layer on a JSON input; returns its JSON answer."""

def analyze_bytes(data: bytes, name_hint: str | None = None) -> str:
    """``analyze`` of a record held in memory; returns the JSON answer."""

def compare_bytes(input_json: str, data: bytes, name_hint: str = "measurement") -> str:
    """``compare`` of a job (``{"job": JOB}``) and a measurement held in memory."""

def job_with_keywords(job_json: str, keywords_json: str) -> str:
    """Keyword arguments laid over a job: each a job field or ``estimate``'s flag of that name."""

def cli_main(argv: list[str]) -> int:
    """Runs the command line in process (``argv[0]`` is the program name); its exit code."""
