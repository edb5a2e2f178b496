# ruff: noqa: RUF001, RUF002, SIM905 - Russian word lists are Cyrillic; lists read best as text
"""Description heuristics in English and Russian: word lists, no language model.

Three questions about a tool description, each answered from its words:

- ``is_vague``: the first sentence names no concrete thing. It opens with an
  umbrella phrase ("Works with ...", "Manages ...", "Работает с ...") or,
  past its first word, holds only generic words ("... data", "... a request
  to the API", "... запрос к API"). One word that names a domain thing
  ("order", "курс", "клиента") is enough to pass.
- ``starts_with_action``: the first word looks like a verb: a third-person
  form ("Gets", "Получает"), an imperative or infinitive, or a known
  imperative ("Get", "List"). Not "This ...", "The ...", "Endpoint ...".
- ``says_when``: some word that introduces a situation: "use", "when",
  "if", "before"; "используйте", "когда", "если", "перед".

Russian is matched by stems (a stem plus up to three letters of ending), so
"данные", "данных" and "данными" are one word here.
"""

from __future__ import annotations

import re
from typing import Final

_WORD: Final = re.compile(r"\w+")
_SENTENCE_END: Final = re.compile(r"(?<=[.!?;:])\s+|\n\s*\n")
_CYRILLIC: Final = re.compile(r"[а-яё]")
_MAX_ENDING: Final = 3  # letters a Russian stem may be followed by

# Openings that say nothing about what is done, whatever follows.
_UMBRELLA: Final[tuple[tuple[str, ...], ...]] = (
    ("works", "with"),
    ("work", "with"),
    ("deals", "with"),
    ("interacts", "with"),
    ("operates", "on"),
    ("manages",),
    ("manage",),
    ("handles",),
    ("handle",),
    ("provides", "access"),
    ("gives", "access"),
    ("работает", "с"),
    ("работает", "со"),
    ("работа", "с"),
    ("взаимодействует", "с"),
    ("управляет",),
    ("управление",),
    ("отвечает", "за"),
    ("занимается",),
    ("предоставляет", "доступ"),
    ("обеспечивает", "доступ"),
)

# Words that name no domain thing: generic nouns and the verbs that go with them.
_GENERIC_EN: Final = frozenset(
    """
    data request requests api apis call calls calling operation operations action actions
    query queries endpoint endpoints method methods function functions stuff thing things
    information info it something anything everything task tasks job jobs work service
    services http https rest backend server system systems command commands input inputs
    output outputs payload payloads response responses resource resources record records
    entity entities object objects item items json body logic process processes processing
    handling tool tools result results execute executes executing perform performs run runs
    send sends make makes do does handle handles invoke invokes return returns get gets
    fetch fetches operate operates
    """.split()
)
_GENERIC_RU_STEMS: Final = (
    "данн",
    "запрос",
    "апи",
    "вызов",
    "вызыва",
    "операци",
    "действи",
    "информаци",
    "метод",
    "эндпоинт",
    "сервис",
    "систем",
    "команд",
    "объект",
    "запис",
    "сущност",
    "ресурс",
    "бэкенд",
    "сервер",
    "ответ",
    "результат",
    "выполн",
    "обрабат",
    "обработ",
    "дела",
    "осуществл",
    "производ",
    "отправл",
    "запуска",
    "соверш",
    "обраща",
    "возвраща",
    "получа",
)
# Words that carry no meaning of their own here.
_FILLER_EN: Final = frozenset(
    """
    the a an some any all various different given external remote third party to with on
    for of against via through from in into at by and or as generic arbitrary specified
    provided this that these those its their your our my user users needed required
    necessary specific certain other another one multiple many several etc like such based
    upon using use used whatever kind kinds type types is are be
    """.split()
)
_FILLER_RU: Final = frozenset(
    """
    к ко с со в во на по для из от до и или а но о об при через без его их её ее это этот
    эти все всех весь всё
    """.split()
)
_FILLER_RU_STEMS: Final = (
    "внешн",
    "различн",
    "разн",
    "некотор",
    "люб",
    "заданн",
    "указанн",
    "нужн",
    "необходим",
    "пользовател",
    "определ",
    "соответствующ",
)

_NOT_ACTION_EN: Final = frozenset(
    """
    the this that these a an tool endpoint api method function operation used for it allows
    lets enables helper wrapper is was
    """.split()
)
_IMPERATIVES_EN: Final = frozenset(
    """
    get list create update delete remove add fetch find search look send cancel refund convert
    calculate check validate set start stop upload download read write book schedule approve
    reject assign close open submit generate compute count move copy rename retrieve query
    lookup show describe summarize translate estimate register subscribe unsubscribe notify
    resolve archive restore export import sync verify confirm reset enable disable pause
    resume replace mark tag attach detach link unlink charge pay transfer issue grant revoke
    invite share publish unpublish merge split sort filter rank score predict classify ping
    echo build deploy restart scale provision save load post apply change edit modify insert
    """.split()
)
_NOT_ACTION_RU: Final = frozenset(
    """
    этот эта это данный данная инструмент метод эндпоинт функция операция для позволяет
    используется служит предназначен апи список
    """.split()
)
_VERB_ENDINGS_RU: Final = (
    "ет",
    "ёт",
    "ит",
    "ят",
    "ат",
    "ют",
    "ут",
    "ть",
    "ти",
    "чь",
    "ся",
    "те",
)

_WHEN_EN: Final = re.compile(
    r"\b(use|call|invoke|choose|pick|prefer|when|whenever|if|before|after|instead|unless)\b"
)
_WHEN_RU: Final = re.compile(
    r"(?<!\w)(использ|вызыва|вызови|примен|когда|если|перед|после|чтобы|вместо|подходит)"
)


def words(text: str) -> list[str]:
    """The lowercased words, ё read as е (so both spellings match one word list)."""
    return [word.replace("ё", "е") for word in _WORD.findall(text.lower())]


def first_sentence(text: str) -> str:
    """The text up to the first ``. ! ? ; :`` followed by a space, or a blank line."""
    return _SENTENCE_END.split(text.strip(), maxsplit=1)[0]


def _stem_match(word: str, stems: tuple[str, ...]) -> bool:
    return any(word.startswith(s) and len(word) - len(s) <= _MAX_ENDING for s in stems)


def _neutral(word: str) -> bool:
    return (
        len(word) == 1
        or word.isdigit()
        or word in _FILLER_EN
        or word in _FILLER_RU
        or _stem_match(word, _FILLER_RU_STEMS)
    )


def _generic(word: str) -> bool:
    return word in _GENERIC_EN or _stem_match(word, _GENERIC_RU_STEMS)


def is_vague(description: str) -> bool:
    """True when the first sentence names no concrete thing (see the module docstring)."""
    sentence = words(first_sentence(description))
    if not sentence:
        return True
    for opening in _UMBRELLA:
        if tuple(sentence[: len(opening)]) == opening:
            return True
    return all(_generic(word) for word in sentence[1:] if not _neutral(word))


def is_russian(text: str) -> bool:
    """Whether the first word is Cyrillic (the linter then gives its hint in Russian)."""
    found = words(text)
    return bool(found) and bool(_CYRILLIC.search(found[0]))


def starts_with_action(description: str) -> bool:
    """Whether the first word looks like a verb ("Gets", "List", "Получает")."""
    found = words(description)
    if not found:
        return False
    first = found[0]
    if _CYRILLIC.search(first):
        return first not in _NOT_ACTION_RU and first.endswith(_VERB_ENDINGS_RU)
    if first in _NOT_ACTION_EN:
        return False
    if first in _IMPERATIVES_EN:
        return True
    # Third person: "gets", "lists", "searches"; not "status", "class", "analysis".
    return len(first) >= 4 and first.endswith("s") and not first.endswith(("ss", "us", "is"))


def says_when(description: str) -> bool:
    """Whether a word introduces when to use the tool ("when", "if", "когда", "если", ...)."""
    text = description.lower()
    return bool(_WHEN_EN.search(text) or _WHEN_RU.search(text))
