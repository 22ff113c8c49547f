"""Date normalisation: a date as a locale writes it -> ISO 8601, "de 17. Mai 2023" -> "2023-05-17".

Random dates in [min_year, max_year] are rendered by Babel's `format_date` with CLDR's short,
medium, long and full patterns in each of `locales` (Babel: BSD-3-Clause; CLDR: Unicode licence).
The source starts with the locale code as one token, then one token per character: the code makes
the task well-posed, since "5/6/23" is 6 May in `en` and 5 June in `es`. Targets are the ten
characters of YYYY-MM-DD. A classic attention demo: the alignment maps day, month and year pieces
of each pattern onto their places in the ISO string.
"""

from __future__ import annotations

import datetime
import random
from importlib.metadata import version
from typing import Any

from attnx.registry import register_task
from attnx.tasks.base import SizedTask, check
from attnx.tasks.cache import CachedTextTask, require
from attnx.tasks.text import Example, unique_examples

FORMATS = ("short", "medium", "long", "full")


@register_task("dates")
class DatesTask(CachedTextTask, SizedTask):
    """Dates in CLDR formats of several locales -> YYYY-MM-DD; characters in and out."""

    model_type = "seq2seq"

    def __init__(
        self,
        locales: tuple[str, ...] = ("en", "de", "fr", "es", "zh"),
        formats: tuple[str, ...] = FORMATS,
        min_year: int = 1950,
        max_year: int = 2049,
        train_size: int = 10000,  # SizedTask's, with this task's own defaults
        val_size: int = 1000,
        test_size: int = 1000,
        **kwargs: Any,
    ) -> None:
        super().__init__(train_size=train_size, val_size=val_size, test_size=test_size, **kwargs)
        babel = require("babel", "dates")
        self.locales, self.formats = tuple(locales), tuple(formats)
        check("locales", self.locales, len(self.locales) >= 1, "a non-empty list of locale codes")
        for code in self.locales:
            try:
                babel.Locale.parse(code)
            except (ValueError, babel.UnknownLocaleError):
                check("locales", code, False, "locale codes Babel knows, e.g. en, de, fr, es, zh, pt_BR")
        valid_formats = len(self.formats) >= 1 and set(self.formats) <= set(FORMATS)
        check("formats", self.formats, valid_formats, f"a non-empty list of {', '.join(FORMATS)}")
        check("min_year", min_year, 1 <= min_year <= max_year, f"in [1, max_year ({max_year})]")
        check("max_year", max_year, max_year <= 9999, "<= 9999")
        # Short patterns often print two-digit years ("5/17/23"), unambiguous within 100 years only.
        span = "short" not in self.formats or max_year - min_year < 100
        check("max_year", max_year, span, f"< min_year + 100 ({min_year + 100}) with short formats")
        self.min_year, self.max_year = min_year, max_year

    def data_version(self) -> str:
        return version("babel")  # CLDR patterns change between Babel releases

    def tokenize(self, text: str) -> list[str]:
        locale, _, written = text.strip().partition(" ")
        if locale not in self.locales:
            raise ValueError(f"{text!r} must start with one of the locale codes {', '.join(self.locales)}")
        return [locale, *written]

    def tokenize_target(self, text: str) -> list[str]:
        return list(text)

    def detokenize(self, tokens: list[str]) -> str:
        return "".join(tokens)

    def examples(self) -> dict[str, list[Example]]:
        return unique_examples(self.sample, self.sizes, self.seed)

    def sample(self, rng: random.Random) -> Example:
        from babel.dates import format_date

        first, last = datetime.date(self.min_year, 1, 1), datetime.date(self.max_year, 12, 31)
        date = datetime.date.fromordinal(rng.randint(first.toordinal(), last.toordinal()))
        locale = rng.choice(self.locales)
        return f"{locale} {format_date(date, rng.choice(self.formats), locale=locale)}", date.isoformat()
