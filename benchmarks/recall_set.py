"""The labelled set of ``recall.py``: facts about one user, questions that find them, filler.

Each :class:`Labelled` fact has

* ``paraphrases``: questions asked **in other words**: after lower-casing and dropping
  :data:`memory_adapters.facts.STOP_WORDS`, a question and its fact's key and value share no
  word, and no word of one starts with the first five letters of a word of the other (so
  that a stemming full-text engine, PostgreSQL's, finds no match either). Keyword search
  cannot find these facts; only meaning can;
* ``shared``: questions sharing at least one word with their fact (the variant where keyword
  search can help).

:func:`check` asserts both properties; ``recall.py`` calls it before every run. The filler
(:func:`filler`) is deterministic: notes, contacts, trips, recipes... about other things,
written from word lists with a seeded generator, so that the right fact must be found among
distractors of the same vocabulary.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass

from memory_adapters.facts import STOP_WORDS, search_text

_WORD = re.compile(r"\w+", re.UNICODE)
STEM_PREFIX = 5
"""Words sharing this many first letters count as the same word for :func:`check`."""


@dataclass(frozen=True, slots=True)
class Labelled:
    key: str
    value: str
    paraphrases: tuple[str, ...]
    shared: tuple[str, ...]


def _f(key: str, value: str, paraphrase: str, shared: str) -> Labelled:
    return Labelled(key, value, (paraphrase,), (shared,))


LABELLED: tuple[Labelled, ...] = (
    _f("favourite_tea", "oolong", "Which drink do I prefer?", "What tea do I like?"),
    _f("home_city", "Lisbon", "Where do I live?", "Which city do I live in?"),
    _f("allergy", "peanuts", "What food makes me ill?", "Do I have an allergy?"),
    _f("employer", "Acme Bank", "Which company do I work for?", "Who is my employer?"),
    _f("dog_name", "Rex", "What is my pet called?", "What is my dog called?"),
    _f("birthday", "14 March", "When was I born?", "When is my birthday?"),
    _f("spouse_name", "Maria", "Who am I married to?", "What is my spouse called?"),
    _f(
        "native_language",
        "Portuguese",
        "What is my mother tongue?",
        "Which language did I grow up speaking?",
    ),
    _f("job_title", "software engineer", "What do I do for a living?", "What is my job?"),
    _f("favourite_sport", "tennis", "Which game do I enjoy playing?", "Which sport do I like?"),
    _f("car_model", "Toyota Corolla", "What vehicle do I drive?", "What car do I drive?"),
    _f(
        "blood_type",
        "O negative",
        "What would a hospital need to know for a transfusion?",
        "What is my blood type?",
    ),
    _f("shoe_size", "42", "How big are my feet?", "What is my shoe size?"),
    _f("favourite_color", "green", "Which hue do I like best?", "Which color do I like?"),
    _f(
        "coffee_order",
        "flat white with oat milk",
        "How do I take my morning caffeine?",
        "How do I order my coffee?",
    ),
    _f("university", "University of Porto", "Where did I study?", "Which university did I attend?"),
    _f(
        "degree",
        "MSc in computer science",
        "What qualification did I earn at college?",
        "What degree do I hold?",
    ),
    _f("hometown", "Braga", "Where did I grow up?", "What is my hometown?"),
    _f("phone_model", "Pixel 8", "Which mobile handset do I use?", "Which phone do I have?"),
    _f("gym_days", "Monday and Thursday", "When do I work out?", "Which days do I go to the gym?"),
    _f("daughter_name", "Sofia", "What is my little girl called?", "What is my daughter's name?"),
    _f("son_age", "7", "How old is my boy?", "How old is my son?"),
    _f(
        "favourite_author",
        "Jose Saramago",
        "Which novelist do I admire?",
        "Who is my favourite author?",
    ),
    _f(
        "favourite_cuisine",
        "Japanese",
        "What kind of food do I love eating?",
        "Which cuisine do I prefer?",
    ),
    _f("diet", "vegetarian", "Do I eat meat?", "What diet do I follow?"),
    _f("commute", "by bicycle", "How do I get to the office?", "How do I commute?"),
    _f("instrument", "cello", "What do I play in the orchestra?", "Which instrument do I play?"),
    _f(
        "wifi_password",
        "sunflower42",
        "What is the code for the internet at home?",
        "What is the wifi password?",
    ),
    _f("doctor_name", "Dr. Silva", "Who is my physician?", "Who is my doctor?"),
    _f(
        "dentist_appointment",
        "next Tuesday at 10",
        "When should I see the tooth specialist?",
        "When is my dentist appointment?",
    ),
    _f(
        "passport_expiry",
        "June 2029",
        "When does my travel document run out?",
        "When does my passport become invalid?",
    ),
    _f("favourite_movie", "Spirited Away", "Which film do I love?", "What is my favourite movie?"),
    _f("favourite_band", "Radiohead", "Which musicians do I listen to?", "Which band do I like?"),
    _f(
        "vacation_plan",
        "two weeks in Japan in October",
        "Where am I travelling for my holidays?",
        "What is my vacation plan?",
    ),
    _f("anniversary", "2 September", "When did we get married?", "When is our anniversary?"),
    _f("landlord", "Mr. Costa", "Who owns the flat I rent?", "Who is my landlord?"),
    _f("rent", "1,200 euros a month", "How much do I pay for housing?", "How much is my rent?"),
    _f("height", "1.78 metres", "How tall am I?", "What is my height?"),
    _f("eye_color", "brown", "What shade are my irises?", "What is my eye color?"),
    _f(
        "favourite_season",
        "autumn",
        "Which time of year do I enjoy?",
        "Which season do I like?",
    ),
    _f("mother_name", "Helena", "What is mum called?", "What is my mother's name?"),
    _f(
        "father_job",
        "retired carpenter",
        "What did dad do for work?",
        "What was my father's job?",
    ),
    _f("siblings", "two brothers", "Who else did my parents raise?", "Do I have siblings?"),
    _f(
        "favourite_fruit",
        "mango",
        "Which sweet produce do I snack on?",
        "Which fruit do I like?",
    ),
    _f("dislikes", "coriander", "Which herb do I hate?", "What are my dislikes?"),
    _f(
        "timezone",
        "Europe/Lisbon",
        "What clock offset applies where I am?",
        "What is my timezone?",
    ),
    _f(
        "email",
        "ana.pereira@example.com",
        "How can people write to me electronically?",
        "What is my email?",
    ),
    _f("nickname", "Nina", "What do friends call me?", "What is my nickname?"),
    _f(
        "favourite_restaurant",
        "Taberna do Mar",
        "Where do I like to eat out?",
        "Which restaurant do I like?",
    ),
    _f("hobby", "rock climbing", "What do I do on weekends for fun?", "What is my hobby?"),
    _f("cat_name", "Luna", "What is the kitten called?", "What is my cat's name?"),
    _f("manager_name", "Paul Richards", "Who is my boss?", "Who is my manager?"),
    _f(
        "team",
        "payments platform",
        "Which group do I belong to at the office?",
        "Which team am I on?",
    ),
    _f(
        "employment_start",
        "2019",
        "Since when have I had this position?",
        "When did my employment begin?",
    ),
    _f("salary", "85,000 euros", "How much do I earn?", "What is my salary?"),
    _f("laptop", "ThinkPad X1", "Which computer do I use?", "Which laptop do I have?"),
    _f(
        "operating_system",
        "Arch Linux",
        "What software runs on my machine?",
        "Which operating system do I use?",
    ),
    _f(
        "programming_language",
        "Rust",
        "Which coding tongue do I write software in?",
        "Which programming language do I use?",
    ),
    _f("editor", "Neovim", "Which tool do I write code in?", "Which editor do I use?"),
    _f(
        "favourite_beach",
        "Comporta",
        "Where do I go to swim in the sea?",
        "Which beach do I like?",
    ),
    _f(
        "marathon_time",
        "3 hours 45 minutes",
        "How fast did I run the long race?",
        "What was my marathon time?",
    ),
    _f(
        "reading_now",
        "The Name of the Rose",
        "Which book is on my nightstand?",
        "What am I reading?",
    ),
    _f(
        "insurance_provider",
        "Fidelidade",
        "Who covers my health costs?",
        "Who is my insurance provider?",
    ),
    _f("parking_spot", "level 2, bay 17", "Where do I leave the car?", "Where is my parking spot?"),
    _f("neighbour_name", "Mrs. Alves", "Who lives next door?", "What is my neighbour's name?"),
    _f(
        "favourite_dessert",
        "pastel de nata",
        "Which sweet treat do I crave?",
        "What dessert do I love?",
    ),
)


def content_words(text: str) -> set[str]:
    """The lower-case words of ``text`` without :data:`~memory_adapters.facts.STOP_WORDS`."""
    return {w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS}


def _stems(words: set[str]) -> set[str]:
    return {w[:STEM_PREFIX] for w in words}


def fact_words(fact: Labelled) -> set[str]:
    """What keyword search indexes for the fact (its key and value), as content words."""
    return content_words(search_text(fact.key, fact.value))


def check() -> None:
    """Assert the set's properties (see the module's docstring)."""
    keys = [f.key for f in LABELLED]
    assert len(set(keys)) == len(keys) >= 60, "at least 60 facts with distinct keys"
    for fact in LABELLED:
        words = fact_words(fact)
        assert words, fact.key
        for question in fact.paraphrases:
            asked = content_words(question)
            assert asked, question
            assert not asked & words, f"{question!r} shares {asked & words} with {fact.key}"
            common = _stems(asked) & _stems(words)
            assert not common, f"{question!r} shares the stems {common} with {fact.key}"
        for question in fact.shared:
            assert content_words(question) & words, f"{question!r} shares no word with {fact.key}"


# -- the filler ---------------------------------------------------------------------------------


def _words(text: str, sep: str | None = None) -> tuple[str, ...]:
    return tuple(w.strip() for w in text.split(sep))


_NAMES = _words(
    "Ana Bruno Carla Diego Elena Filipe Greta Hugo Ines Joao Karin Luis Marta Nuno Olga Pedro "
    "Rita Sergio Tania Vasco"
)
_SURNAMES = _words("Santos Ferreira Oliveira Rodrigues Martins Sousa Gomes Lopes Marques Ribeiro")
_PROJECTS = _words("atlas beacon comet delta ember falcon harbor ion juniper keystone")
_TOPICS = _words(
    "budget roadmap hiring migration outage pricing onboarding security audit launch "
    "retrospective forecast contract invoices"
)
_DAYS = _words("Monday Tuesday Wednesday Thursday Friday Saturday Sunday")
_ITEMS = _words(
    "batteries lightbulbs detergent rice olive_oil tomatoes envelopes printer_paper candles "
    "shampoo toothpaste onions garlic lemons bread butter"
)
_TASKS = _words(
    "renew submit return call email book cancel repair water clean pay order collect update"
)
_OBJECTS = _words(
    "library books, quarterly report, broken blender, plants, gutter, electricity bill, "
    "insurance form, spare keys, bike lights, tax return",
    ",",
)
_CITIES = _words("Madrid Paris Berlin Rome Vienna Prague Oslo Dublin Krakow Seville")
_HOTELS = _words("Central Riverside Grand Park Harbour Garden Plaza Royal")
_INGREDIENTS = _words(
    "chickpeas spinach cod potatoes paprika cumin yoghurt lentils pumpkin chorizo mushrooms barley"
)
_ROLES = _words("accountant architect plumber electrician lawyer designer tutor recruiter")
_COMPANIES = _words("Northwind Globex Initech Umbrella Stark Wayne Hooli Vandelay")
_MONTHS = _words("January February April May July August November December")


def filler(count: int, seed: int = 12) -> Iterator[tuple[str, str]]:
    """``count`` distractor facts ``(key, value)``, the same for the same ``count`` and
    ``seed``; a prefix of a longer run (so a scope can grow from one size to the next)."""
    rng = random.Random(seed)
    for i in range(count):
        kind = i % 6
        if kind == 0:
            key = f"meeting_{i:06d}"
            value = (
                f"{rng.choice(_DAYS)} {rng.choice(_TOPICS)} sync with {rng.choice(_NAMES)} "
                f"about project {rng.choice(_PROJECTS)}"
            )
        elif kind == 1:
            key = f"shopping_{i:06d}"
            value = f"buy {rng.randint(1, 6)} {rng.choice(_ITEMS).replace('_', ' ')}"
        elif kind == 2:
            key = f"reminder_{i:06d}"
            value = f"{rng.choice(_TASKS)} the {rng.choice(_OBJECTS)} before {rng.choice(_DAYS)}"
        elif kind == 3:
            name = rng.choice(_NAMES)
            key = f"contact_{name.lower()}_{i:06d}"
            value = (
                f"{name} {rng.choice(_SURNAMES)}, {rng.choice(_ROLES)} at "
                f"{rng.choice(_COMPANIES)}, +351 9{rng.randint(10000000, 99999999)}"
            )
        elif kind == 4:
            key = f"trip_{i:06d}"
            value = (
                f"{rng.choice(_CITIES)} in {rng.choice(_MONTHS)} {rng.randint(2018, 2027)}, "
                f"hotel {rng.choice(_HOTELS)}"
            )
        else:
            key = f"recipe_{i:06d}"
            picked = rng.sample(_INGREDIENTS, 3)
            value = f"{picked[0]}, {picked[1]} and {picked[2]}, {rng.randint(2, 12) * 5} minutes"
        yield key, value
