"""The console script builds only the parser of the command it runs (``build_parser(command)``):
for that command it must read the same arguments, print the same help and the same errors as
the parser of every command, which still reads everything else (``--help``, unknown commands)."""

from __future__ import annotations

import argparse

import pytest

from logkeeper import cli


def subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found: argparse.ArgumentParser = sub.choices[command]
    return found


def test_every_command_has_a_group_and_every_group_its_commands() -> None:
    whole = subparser_names(cli.build_parser())
    assert whole == set(cli.COMMANDS)
    for command, group in cli.COMMANDS.items():
        assert command in subparser_names(cli.build_parser(command))
        assert cli.COMMANDS[command] is group


def subparser_names(parser: argparse.ArgumentParser) -> set[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_a_commands_parser_is_the_same_alone(command: str) -> None:
    alone = subparser(cli.build_parser(command), command)
    whole = subparser(cli.build_parser(), command)
    assert alone.format_help() == whole.format_help()
    assert alone.format_usage() == whole.format_usage()


@pytest.mark.parametrize(
    "argv",
    [
        ["clean", "--dir", "d", "--config", "cleanup.policy=compact"],
        ["--log-level", "INFO", "clean", "--dir", "d", "--json"],
        ["--log-level=DEBUG", "retention", "--dir", "d", "--dry-run"],
        ["verify", "--dir", "d"],
        ["spark", "stats", "--dir", "d"],
        ["demo"],
    ],
)
def test_the_same_arguments_are_read(argv: list[str]) -> None:
    command = cli.command_of(argv)
    assert command is not None
    alone = vars(cli.build_parser(command).parse_args(argv))
    whole = vars(cli.build_parser().parse_args(argv))
    assert alone == whole


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--help"],
        ["-h"],
        ["bogus"],
        ["--log-level"],
        ["--log-lev", "INFO", "clean"],  # an abbreviation: left to argparse
        ["--dir", "d", "clean"],
    ],
)
def test_anything_else_goes_to_the_whole_parser(argv: list[str]) -> None:
    assert cli.command_of(argv) is None


@pytest.mark.parametrize(
    "argv",
    [
        ["clean"],  # --dir missing
        ["clean", "--dir", "d", "--bogus"],  # unknown argument: the top-level parser's error
        ["clean", "--dir", "d", "--dedupe-buffer-bytes", "x"],
    ],
)
def test_the_same_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    messages = []
    for parser in (cli.build_parser(cli.command_of(argv)), cli.build_parser()):
        with pytest.raises(SystemExit) as exited:
            parser.parse_args(argv)
        assert exited.value.code == 2
        messages.append(capsys.readouterr().err)
    assert messages[0] == messages[1]
    assert "error:" in messages[0]
