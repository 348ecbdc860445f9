"""PrefEval (Zhao et al., ICLR 2025) as a retrieval benchmark, in the shape of its RAG setting.

Upstream states a preference early in a conversation, inserts unrelated "inter-turn" chats, then asks
a question whose good answer must respect the preference; its RAG baseline retrieves messages of that
history. Here each item becomes one user whose records are the messages in which the preference was
expressed plus shared distractor messages, and whose question's gold is the preference messages. The
4 MCQ options (preference-consistent one first) ride along as choices for the classification task:
:func:`prefeval_choices` makes them MemRerank's instances, the topic being the category and the group.
Every record carries ``metadata["role"]`` (``"user"`` or ``"assistant"``) so it can be rendered the
way upstream's RAG prompt shows retrieved messages ("user: ...").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from personamem.datasets.benchmark import Benchmark, Question, Skip
from personamem.datasets.choice import ChoiceInstance, ChoiceNeeds
from personamem.errors import IngestError
from personamem.jsonfile import JsonFile
from personamem.records import JsonScalar, Record, RecordKind

__all__ = [
    "PrefEvalForm",
    "PrefEvalOptions",
    "load_prefeval_benchmark",
    "load_prefeval_choices",
    "prefeval_choices",
]

PrefEvalForm = Literal["explicit", "choice", "persona"]


class PrefEvalOptions(BaseModel):
    """How PrefEval is read."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    form: PrefEvalForm = "explicit"
    """PrefEval: the preference form."""
    inter_turns: int = Field(default=20, ge=0)
    """PrefEval: distractor user turns per user."""
    replies: bool = False
    """PrefEval: keep the assistant's reply to each distractor turn, each distractor chat a session."""


_FORM_DIRS: dict[str, tuple[str, ...]] = {
    "explicit": ("explicit_preference",),
    "choice": ("implicit_preference", "choice-based"),
    "persona": ("implicit_preference", "persona-driven"),
}
_MCQ_DIR = "mcq_options"
_INTER_TURNS = "filtered_inter_turns.json"
_N_OPTIONS = 4  # upstream's classification task always offers four
_CHOICE_MESSAGES = (("query", "user"), ("assistant_options", "assistant"), ("user_selection", "user"))
_Message = tuple[str, str, str, str | None]  # record id, role, text, session
NO_PREFERENCE_TEXT = "every message that expresses the preference is blank"


def load_prefeval_benchmark(
    data_dir: str | Path,
    *,
    form: PrefEvalForm = "explicit",
    inter_turns: int = 20,
    replies: bool = False,
) -> Benchmark:
    """Load every topic of one preference form, one user per item, with shared distractor messages.

    Records per form (gold = all of the item's non-distractor records, grade 1):

    * ``explicit``: the preference statement, id ``"preference"``.
    * ``choice``: ``"preference-0"`` the user's request for options, ``"preference-1"`` the
      assistant's option list and ``"preference-2"`` the user's pick. The preference is revealed by
      which options the user turned down, and the pick alone often does not say ("I'll go with
      Codenames. The other options don't really appeal to me."), so the option list is evidence too.
      The assistant's closing acknowledgement only restates the pick and is left out.
    * ``persona``: every user message of the persona chat, ``"preference-<turn>"``. The preference is
      paraphrased inside one of them, but upstream does not say which and it is rarely verbatim, so
      the whole chat is gold rather than a guessed turn. The assistant's replies are left out: the
      user states the preference, a reply at most echoes it.

    Args:
        data_dir: the folder holding ``benchmark_dataset/``, or ``benchmark_dataset`` itself.
        form: which preference form to load.
        inter_turns: how many distractor messages each user gets: the first ``inter_turns`` user
            messages of ``filtered_inter_turns.json`` in file order (upstream's inter turns), ids
            ``"inter-<n>"``, the same text for every user. 0 gives none.
        replies: also keep the assistant's reply that follows each of those messages
            (``"inter-<n>-reply"``, role ``assistant``), and mark every message with its chat
            (``metadata["session"]``: ``"inter-chat-<i>"``, the preference's ``"preference-chat"``).
            Upstream's history holds the replies; with all 316 turns they make a long user–assistant
            history of 632 distractor messages, a third of them past the encoder's 256-word-piece
            window: the shape of the long user–assistant histories issue 57 measures the default
            on. Off: user messages alone, as every result before it was measured.

    Raises:
        IngestError: the layout is not PrefEval's, a file is missing or malformed, a topic's form and
            MCQ files disagree on the items, or there are fewer distractor messages than asked for.
        ValueError: an unknown ``form`` or a negative ``inter_turns``.
    """
    if form not in _FORM_DIRS:
        raise ValueError(f"unknown PrefEval form {form!r}; expected one of {get_args(PrefEvalForm)}")
    if inter_turns < 0:
        raise ValueError(f"inter_turns must be >= 0, got {inter_turns}")
    root = _dataset_root(Path(data_dir))
    form_dir = root.joinpath(*_FORM_DIRS[form])
    topics = _topics(form_dir)
    inter = JsonFile(root / _INTER_TURNS)
    distractors = _distractors(inter, inter_turns, replies) if inter_turns else []
    records: list[Record] = []
    questions: list[Question] = []
    skipped: list[Skip] = []
    for topic in topics:
        src, mcq = JsonFile(form_dir / f"{topic}.json"), JsonFile(root / _MCQ_DIR / f"{topic}.json")
        for index, (item, options) in enumerate(_paired_items(src, mcq, topic)):
            where = f"topic {topic!r}, item {index}"
            user, question_id = f"prefeval/{topic}/{index}", f"{topic}/{index}"
            messages = _preference_messages(src, item, form, where)
            if replies:  # every message then names its chat
                messages = [
                    (record_id, role, text, "preference-chat") for record_id, role, text, _ in messages
                ]
            if not messages:
                skipped.append(Skip(question_id, NO_PREFERENCE_TEXT))
                continue
            records.extend(_records(user, [*messages, *distractors]))
            questions.append(
                Question(
                    id=question_id,
                    user_id=user,
                    text=item["question"],  # checked by _paired_items
                    relevant={record_id: 1 for record_id, _, _, _ in messages},
                    category=topic,
                    choices=options,
                    attributes=_attributes(src, item, where, form),
                )
            )
    return Benchmark(name=f"prefeval-{form}", records=records, questions=questions, skipped=skipped)


def _dataset_root(data_dir: Path) -> Path:
    """``benchmark_dataset`` itself, found as ``data_dir`` or inside it."""
    for candidate in (data_dir / "benchmark_dataset", data_dir):
        if (candidate / _MCQ_DIR).is_dir():
            return candidate
    raise IngestError(
        f"not a PrefEval folder: expected benchmark_dataset/ (or its contents: {_MCQ_DIR}/, "
        f"explicit_preference/, implicit_preference/, {_INTER_TURNS})",
        path=str(data_dir),
    )


def _topics(form_dir: Path) -> list[str]:
    """Topic names, from the form folder's ``<topic>.json`` files."""
    if not form_dir.is_dir():
        raise IngestError("PrefEval form folder not found", path=str(form_dir))
    topics = sorted(path.stem for path in form_dir.glob("*.json"))
    if not topics:
        raise IngestError("no <topic>.json files in the PrefEval form folder", path=str(form_dir))
    return topics


def _items(src: JsonFile) -> list[dict[str, Any]]:
    return [
        src.expect(item, dict, f"item {i}")
        for i, item in enumerate(src.expect(src.load(), list, "top level"))
    ]


def _paired_items(src: JsonFile, mcq: JsonFile, topic: str) -> list[tuple[dict[str, Any], tuple[str, ...]]]:
    """Each form item with its MCQ options, checked to be the same item (files share the order)."""
    items, mcq_items = _items(src), _items(mcq)
    if len(items) != len(mcq_items):
        raise mcq.error(f"topic {topic!r}: {len(mcq_items)} MCQ items but {len(items)} in {src.path}")
    pairs = []
    for index, (item, mcq_item) in enumerate(zip(items, mcq_items, strict=True)):
        where = f"topic {topic!r}, item {index}"
        if src.text(item, "question", where) != mcq.text(mcq_item, "question", where):
            raise mcq.error(f"{where}: question differs from the one in {src.path}")
        pairs.append((item, _options(mcq, mcq_item, where)))
    return pairs


def _options(mcq: JsonFile, mcq_item: dict[str, Any], where: str) -> tuple[str, ...]:
    options = mcq.field(mcq_item, "classification_task_options", list, where)
    if len(options) != _N_OPTIONS:
        raise mcq.error(f"{where}: expected {_N_OPTIONS} classification_task_options, got {len(options)}")
    return tuple(mcq.expect(option, str, f"{where}, option {i}") for i, option in enumerate(options))


def _preference_messages(src: JsonFile, item: dict[str, Any], form: str, where: str) -> list[_Message]:
    """The non-blank messages that expressed the preference, as (record id, role, text, no session)."""
    if form == "explicit":
        return _non_blank([("preference", "user", src.field(item, "preference", str, where), None)])
    conversation = src.field(item, "conversation", dict, where)
    read = _choice_messages if form == "choice" else _persona_messages
    messages = read(src, conversation, where)
    return _non_blank([(f"preference-{n}", role, text, None) for n, (role, text) in enumerate(messages)])


def _choice_messages(src: JsonFile, conversation: dict[str, Any], where: str) -> list[tuple[str, str]]:
    where = f"{where}, conversation"
    return [(role, src.field(conversation, key, str, where)) for key, role in _CHOICE_MESSAGES]


def _persona_messages(src: JsonFile, conversation: dict[str, Any], where: str) -> list[tuple[str, str]]:
    messages = []
    for key, turn in conversation.items():
        at = f"{where}, conversation turn {key!r}"
        messages.append(("user", src.field(src.expect(turn, dict, at), "user", str, at)))
    return messages


def _distractors(src: JsonFile, count: int, replies: bool) -> list[_Message]:
    """The first ``count`` user messages (blank ones dropped but keeping their number), with replies.

    A reply is the assistant message right after a user message in its chat; with ``replies`` each
    message is also marked with its chat, as a session.
    """
    turns: list[list[Any]] = []  # [user text, reply text or None, chat]
    for i, chat in enumerate(src.expect(src.load(), list, "top level")):
        where, after_user = f"chat {i}", False
        for j, message in enumerate(src.field(src.expect(chat, dict, where), "conversation", list, where)):
            at = f"{where}, message {j}"
            message = src.expect(message, dict, at)
            role = src.field(message, "role", str, at)
            if role == "user":
                turns.append([src.field(message, "content", str, at), None, i])
            elif role == "assistant" and after_user:
                turns[-1][1] = src.field(message, "content", str, at)
            after_user = role == "user"
    if len(turns) < count:
        raise src.error(f"inter_turns={count} asked for, but the file has only {len(turns)} user messages")
    picked: list[_Message] = []
    for n, (text, reply, chat) in enumerate(turns[:count]):
        session = f"inter-chat-{chat}" if replies else None
        picked.append((f"inter-{n}", "user", text, session))
        if replies and reply is not None:
            picked.append((f"inter-{n}-reply", "assistant", reply, session))
    return _non_blank(picked)


def _non_blank(messages: list[_Message]) -> list[_Message]:
    return [message for message in messages if message[2].strip()]


def _records(user: str, messages: list[_Message]) -> list[Record]:
    return [
        Record(
            user_id=user,
            id=record_id,
            text=text,
            kind=RecordKind.CONVERSATION,
            metadata={"role": role} if session is None else {"role": role, "session": session},
        )
        for record_id, role, text, session in messages
    ]


def _attributes(src: JsonFile, item: dict[str, Any], where: str, form: str) -> dict[str, JsonScalar]:
    explanation = item.get("explanation")  # one upstream item (travel_hotel 52) has none
    return {
        "explanation": None if explanation is None else src.expect(explanation, str, f"{where}, explanation"),
        "form": form,
        "preference": src.field(item, "preference", str, where),  # what upstream's LLM judge checks against
    }


def load_prefeval_choices(
    data_dir: str | Path,
    needs: ChoiceNeeds,
    *,
    form: PrefEvalForm = "explicit",
    inter_turns: int = 20,
    replies: bool = False,
) -> list[ChoiceInstance]:
    """:func:`prefeval_choices` of one form's benchmark (``needs`` is not needed: options are given)."""
    return prefeval_choices(
        load_prefeval_benchmark(data_dir, form=form, inter_turns=inter_turns, replies=replies)
    )


def prefeval_choices(benchmark: Benchmark) -> list[ChoiceInstance]:
    """PrefEval's questions as choices among their options; the topic is the category and the group."""
    by_user: dict[str, list[Record]] = {}
    for record in benchmark.records:
        by_user.setdefault(record.user_id, []).append(record)
    return [
        ChoiceInstance(
            id=question.id,
            user_id=question.user_id,
            history=tuple(
                r.model_copy(update={"category": question.category}) for r in by_user[question.user_id]
            ),
            query=question.text,
            candidates=question.choices,
            category=question.category,
            group=question.category,
        )
        for question in benchmark.questions
        if question.choices
    ]
