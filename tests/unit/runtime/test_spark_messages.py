"""The one line a Spark failure is reported with (runtime/job/opening.one_line): the Java
exception's class and message, never a bare "Traceback (most recent call last):" or a class
name with the message on the next line, never a stack frame."""

from __future__ import annotations

from stoker.runtime.job.opening import one_line


def test_a_python_traceback_passed_on_by_spark_shows_its_last_line() -> None:
    text = (
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        '  File "/srv/app.py", line 3, in <module>\n'
        "    import stoker\n"
        "ModuleNotFoundError: No module named 'stoker'\n"
        "\tat org.apache.spark.api.python.BasePythonRunner.handle(Python.scala:1)\n"
    )
    assert one_line(text, "x") == (
        "org.apache.spark.api.python.PythonException: ModuleNotFoundError: No module named 'stoker'"
    )


def test_a_message_on_the_next_line_is_joined_and_frames_are_left_out() -> None:
    text = "org.apache.spark.SparkException:\nEOFException while reading the port\n\tat a.b(C.java)"
    assert (
        one_line(text, "x")
        == "org.apache.spark.SparkException: EOFException while reading the port"
    )
    assert one_line("java.io.IOException: disk full", "x") == "java.io.IOException: disk full"
    assert one_line("   \n", "Py4JJavaError") == "Py4JJavaError"
