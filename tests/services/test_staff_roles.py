"""The role table (services/staff/roles.py) read line by line against the issue: what each role may
do on its own event, that a grant on one event never reaches another or the server scope."""

from __future__ import annotations

import pytest

from labserver.services.staff.roles import (
    AUDITED,
    PERMITS,
    SERVER_SCOPE,
    Action,
    Grant,
    Role,
    allowed,
    events_seen,
    may,
    role_on,
)

A, B = 1, 2


@pytest.mark.parametrize("action", list(Action))
def test_an_event_role_never_reaches_another_event_or_the_server(action: Action) -> None:
    for role in Role:
        grants = [Grant(role, A)]
        assert not may(grants, action, B), (role, action)
        if action in SERVER_SCOPE:
            assert not may(grants, action, None) and not may(grants, action, A), (role, action)


def test_the_assistant_has_the_grid_the_help_queue_terminals_and_consented_help_only() -> None:
    grants = [Grant(Role.assistant, A)]
    for yes in (Action.view, Action.help, Action.share, Action.terminal_view):
        assert may(grants, yes, A)
    for no in (
        Action.stop_all,
        Action.reveal,
        Action.export,
        Action.report,
        Action.pace,
        Action.broadcast,
        Action.reset,
        Action.remove_attendee,
        Action.edit,
        Action.staff,
    ):
        assert not may(grants, no, A), no


def test_the_instructor_runs_their_event_but_neither_edits_it_nor_staffs_it() -> None:
    grants = [Grant(Role.instructor, A)]
    for yes in (Action.pace, Action.broadcast, Action.reset, Action.stop_all, Action.reveal, Action.report):
        assert may(grants, yes, A), yes
    for no in (Action.edit, Action.staff, Action.create_event, Action.server):
        assert not may(grants, no, A), no


def test_an_organiser_of_every_event_may_everything_everywhere() -> None:
    grants = [Grant(Role.organiser, None)]
    assert all(may(grants, action, event) for action in Action for event in (A, B, None))
    assert events_seen(grants) is None


def test_roles_nest_and_the_strongest_counts() -> None:
    assert PERMITS[Role.assistant] < PERMITS[Role.instructor] < PERMITS[Role.organiser]
    grants = [Grant(Role.assistant, A), Grant(Role.instructor, A), Grant(Role.assistant, B)]
    assert role_on(grants, A) == Role.instructor and role_on(grants, B) == Role.assistant
    assert events_seen(grants) == {A, B}
    assert "stop-all" in allowed(grants, A) and "stop-all" not in allowed(grants, B)


def test_a_list_without_an_event_needs_some_role_and_lists_are_filtered() -> None:
    assert may([Grant(Role.assistant, A)], Action.view, None)
    assert not may([], Action.view, None)


def test_what_is_audited_is_what_changes_an_attendee_or_the_staff() -> None:
    assert Action.view not in AUDITED and Action.terminal_view not in AUDITED
    for action in (Action.reset, Action.stop_all, Action.share, Action.reveal, Action.pace, Action.broadcast):
        assert action in AUDITED
    assert {Action.export, Action.report, Action.staff} <= AUDITED
