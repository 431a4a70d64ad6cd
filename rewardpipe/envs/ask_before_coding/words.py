"""The words of a turn, as the question and reply rules read them: stopwords, filler, stems, concepts.

Pure text functions, no I/O, each linear in the length of the text (one regex pass that cannot backtrack,
then per-word work on words capped in length).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from itertools import pairwise

STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "then",
        "else",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "from",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "do",
        "does",
        "did",
        "doing",
        "have",
        "has",
        "had",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "can",
        "could",
        "should",
        "would",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "i",
        "you",
        "we",
        "they",
        "he",
        "she",
        "me",
        "my",
        "your",
        "our",
        "their",
        "us",
        "them",
        "not",
        "no",
        "yes",
        "so",
        "than",
        "too",
        "very",
        "just",
        "also",
        "any",
        "some",
        "all",
        "each",
        "every",
        "about",
        "into",
        "over",
        "under",
        "again",
        "further",
        "once",
        "only",
        "own",
        "same",
        "such",
        "both",
        "few",
        "more",
        "most",
        "other",
        "please",
        "thanks",
        "thank",
        # what is left of a contraction once its apostrophe splits it ("I'll", "don't", "we've")
        "ll",
        "ve",
        "re",
        "don",
        "doesn",
        "didn",
        "isn",
        "aren",
        "wasn",
        "weren",
        "won",
        "wouldn",
        "shouldn",
        "couldn",
        "haven",
        "hasn",
        "hadn",
        "mustn",
        "needn",
        "tell",
        "know",
        "want",
        "need",
        "like",
        "let",
        "lets",
        "ok",
        "okay",
        "sure",
        "before",
        "keep",
        "mind",
        "function",
        "write",
        "code",
        "program",
        "implement",
        "return",
        "returns",
        "returned",
        "value",
        "values",
        "input",
        "output",
        "give",
        "get",
        "make",
        "use",
        "should",
        "does",
        "do",
    ]
)

# Questions that ask for the task's requirements in general rather than about something specific. Stemmed below
# (after _stem is defined) so they compare equal to the stemmed words of a question.
_GENERIC_CUE_WORDS = [
    "requirement",
    "requirements",
    "detail",
    "details",
    "spec",
    "specs",
    "specification",
    "specifications",
    "constraint",
    "constraints",
    "expect",
    "expected",
    "expectation",
    "expectations",
    "edge",
    "assumption",
    "assumptions",
    "rule",
    "rules",
]
# ("edge" alone marks "edge cases" as generic, and questions.py reads the "case" of "edge cases" (and of "special
# cases", "corner cases"...) as part of that cue: elsewhere "case" stays specific, for questions about letter case.)

# Words that name no subject: a question made only of these and stopwords ("can you explain again?", "is that
# right?", "anything else?") asks nothing specific, so it earns no detail (and no asked_before_coding).
_FILLER_WORDS = [
    "explain",
    "explanation",
    "again",
    "mean",
    "meant",
    "clarify",
    "clarification",
    "elaborate",
    "repeat",
    "rephrase",
    "understand",
    "understood",
    "confirm",
    "sure",
    "right",
    "correct",
    "fine",
    "good",
    "great",
    "else",
    "anything",
    "something",
    "everything",
    "question",
    "questions",
    "help",
    "idea",
    "think",
    "thought",
    "thoughts",
    "opinion",
    "suggestion",
    "suggestions",
    "feedback",
    "say",
    "said",
    "thing",
    "things",
    "stuff",
    "exactly",
    "really",
    "hmm",
    "hmmm",
    "huh",
    "hello",
    "hi",
    "hey",
    "wait",
    "well",
    "uh",
    "uhm",
    "um",
    "umm",
    "er",
    "erm",
    "eh",
    "ah",
    "oh",
    "okay",
    "alright",
    # A check on the conversation, not on the program (round thirty-five): "Ready?", "Proceed?", "Sound good?",
    # "Makes sense?", "Clear?", "Done?", "Agreed?", "Any hints?" asked nothing, yet paid asked_before_coding in full
    # when an LLM user volunteered a detail after it (scored without the bookkeeping). What the check is said of
    # stays: "Negative input raises ValueError, makes sense?" asks about negative input.
    "ready",
    "proceed",
    "sound",
    "sounds",
    "sense",
    "clear",
    "done",
    "cool",
    "agree",
    "agreed",
    "hint",
    "hints",
    "tip",
    "tips",
    "advice",
    "comment",
    "comments",
    "continue",
    "ask",
    "asking",
    "info",
    "information",
    "more",
    "context",
    "background",
    "catch",
    "special",
    "particular",
    "specific",
    "specifics",
    "preference",
    "prefer",
    "matter",
    "important",
    "behavior",
    "behaviour",
    "happen",
    "scenario",
    "situation",
    "approach",
    "handle",
    "deal",
    "way",
    "basically",
    "actually",
    "literally",
    "simply",
    "essentially",
    "honestly",
    "precisely",
    "generally",
    "totally",
    "quite",
    "indeed",
    "certainly",
    "definitely",
    "probably",
    "maybe",
    "perhaps",
]
# (The second group asks for "more" without saying about what: "More info?", "Any more context?", "What's the
# catch?", "How should I approach this?". The rule-based simulator would say "that is up to you", but an LLM
# playing the user reads them as "tell me the requirements" and reveals a detail: as filler they reach
# neither simulator, so the two agree. Words a bundled spec item uses ("work", "look", "case") stay subjects.)

# --- text as its reader sees it ------------------------------------------------------------------------------

# A model (or an LLM user it prompts) can write the same words so that no rule reads them, while a person or an
# LLM still does: fullwidth or mathematical letters, a zero-width space or soft hyphen between letters,
# accents or combining marks on every letter, Cyrillic and Greek letters that look Latin. Every rule reads
# text through :func:`fold` first, which undoes all of these; what it cannot undo (another script, letters
# spelt out one by one) is counted by :func:`unread_letters`, so a rule can refuse what it cannot read.
_LOOK_ALIKES = {
    **dict(zip("аеорсухѕіјԁһԛԝӏ", "aeopcyxsijdhqwl", strict=True)),  # Cyrillic lower case
    **dict(zip("АВЕКМНОРСТУХЅІЈԚԜ", "ABEKMHOPCTYXSIJQW", strict=True)),  # Cyrillic upper case
    **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧαοιρυχνκ", "ABEZHIKMNOPTYXaoipuxvk", strict=True)),  # Greek
    # Latin letters with no decomposition, written as their plain reading ("Straße", "Łódź", "Ørsted").
    **dict(
        zip(
            "ßłŁøØđĐæÆœŒþÞðıĸ",
            ["ss", "l", "L", "o", "O", "d", "D", "ae", "AE", "oe", "OE", "th", "TH", "d", "i", "k"],
            strict=True,
        )
    ),
}
# Planes with combining marks and format characters (the others hold only ideographs or nothing assigned).
_MARK_PLANES = (range(0, 0x20000), range(0xE0000, 0xE1000))
# Where Latin small capitals live (IPA extensions, phonetic extensions, Latin extended-D): "ꜱʜᴏᴜʟᴅ" has no
# decomposition, but a reader reads it as "should".
_SMALL_CAPITAL_BLOCKS = (range(0x0250, 0x02B0), range(0x1D00, 0x1D80), range(0xA720, 0xA800))
_SMALL_CAPITAL = "LATIN LETTER SMALL CAPITAL "
# An HTML character reference with its semicolon ("&#83;", "&#x53;", "&nbsp;"): Markdown renders it as the
# character, so a reader sees the plain text. Legacy references without a semicolon ("&not") are left alone.
_CHARACTER_REFERENCE = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")


@lru_cache(maxsize=1)
def _fold_table() -> dict[int, int | str | None]:
    """The translation :func:`fold` applies after NFKD: marks (Mn, Me) and format characters (Cf) dropped,
    look-alikes mapped (built on first use: about 135,000 code points read once)."""
    table: dict[int, int | str | None] = {ord(char): latin for char, latin in _LOOK_ALIKES.items()}
    for plane in _MARK_PLANES:
        for code in plane:
            if unicodedata.category(chr(code)) in ("Mn", "Me", "Cf"):
                table[code] = None
            elif unicodedata.category(chr(code)) == "Nd" and code > 0x7F:
                table[code] = str(unicodedata.decimal(chr(code)))  # "٩٠", "९०" are 90, as int() reads them
    table[0x200B] = ord(" ")  # a zero-width *space* separates words ("More\u200binfo" is two words)
    for block in _SMALL_CAPITAL_BLOCKS:
        for code in block:
            name = unicodedata.name(chr(code), "")
            if name.startswith(_SMALL_CAPITAL) and len(name) == len(_SMALL_CAPITAL) + 1:
                table[code] = name[-1].lower()
    return table


def _unescape(text: str) -> str:
    """``text`` with its HTML character references as the characters a Markdown view shows."""
    import html

    return _CHARACTER_REFERENCE.sub(lambda ref: html.unescape(ref[0]), text) if "&" in text else text


def fold(text: str) -> str:
    """``text`` with compatibility forms as their plain letters (NFKD: fullwidth, ligatures, mathematical
    letters, superscripts), accents and combining marks and invisible format characters (soft hyphen, joiners,
    bidirectional marks) dropped, a zero-width space made a space, and Cyrillic/Greek look-alikes and small
    capitals of Latin letters made Latin; HTML character references ("&#83;", "&nbsp;") read as the characters
    they show. ASCII text without a reference is returned as it is.
    Linear: one scan for references, one normalisation and one translation."""
    text = _unescape(text)
    if text.isascii():
        return text
    return unicodedata.normalize("NFKD", text).translate(_fold_table())


SPELT_OUT_RUN = 3  # one-letter words in a row from which they are a word spelt out, not "e.g." or "x y"


def unread_letters(text: str) -> int:
    """Letters of ``text`` (folded) that no word rule reads: words with a letter outside ASCII (another
    script), and letters spelt out one by one ("V a l u e E r r o r", "n-e-g"): runs of at least
    SPELT_OUT_RUN one-letter words (other than "a" and "I"), so that "e.g.", "i.e." or "if n is 0" cost nothing."""
    unread = run = 0
    for word in _WORD.findall(fold(text)):
        if len(word) == 1 and word.isascii() and word.isalpha() and word not in "aAI":
            run += 1
            continue
        if run >= SPELT_OUT_RUN:
            unread += run
        run = 0
        if not word.isascii():
            unread += len(word)
    return unread + (run if run >= SPELT_OUT_RUN else 0)


def unread_symbols(text: str) -> int:
    """Characters of ``text`` (folded) in tokens with no letter or digit at all: Morse (".- -..."), Braille
    patterns, flag letters, whatever writes words without letters. Ordinary prose has a few ("--", "...",
    "->", a table's "|---|"); a reply written in such a code has one per letter it encodes."""
    count = 0
    for token in _SPACED.findall(fold(text)):
        if _WORD.search(token) or (len(token) > MAX_MORSE_TOKEN and len(set(token)) == 1):
            continue  # a word, or a divider ("-----...", "=====...", longer than any Morse letter or digit)
        count += len(token) - len(_DECORATION.findall(token))
    return count


#: The longest Morse letter or digit ("-----" is 0): a longer run of one character is a divider.
MAX_MORSE_TOKEN = 5
# Box drawing and pictographs (emoji, dingbats, their variation selector and joiner) decorate a reply and
# encode no letters; regional indicators (flag letters, U+1F1E6-1F1FF) are not among them and still count.
_DECORATION = re.compile("[\u2500-\u259f\u2600-\u27bf\U0001f300-\U0001faff\ufe0f\u200d]")


_SPACED = re.compile(r"\S+")
# A word is a whole run of letters and digits of any script (underscores split words: "snake_case"); only
# ASCII words are read, after :func:`fold`. A word with a letter from another script is dropped whole, never
# cut into ASCII fragments (a look-alike spelling, "Mоre infо?" with Cyrillic "о", is folded to the filler
# it is first).
_WORD = re.compile(r"[^\W_]+")
_INLINE_CODE = re.compile(r"`[^`\n]+`")


def _stem(word: str) -> str:
    """:func:`_stem_word`, cached for ordinary words (a pure function of one word; a run's vocabulary is small
    and repeats a lot). A word longer than any real one is stemmed without the cache, which must not keep
    a hostile turn's megabyte-long "words" alive."""
    return _stem_cached(word) if len(word) <= MAX_CACHED_WORD else _stem_word(word)


#: Longest word whose stem is cached.
MAX_CACHED_WORD = 40


def _stem_word(word: str) -> str:
    """A tiny suffix stripper that maps a word's common forms to one key (name/names/named -> "nam").

    Both sides of a comparison go through it, so it only has to be consistent, not linguistic: "cases"
    and "case" must meet, which is why a final "e" goes too and "es" is only a suffix after s/x/z/ch/sh.
    """
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            if suffix == "es" and not word[:-2].endswith(("s", "x", "z", "ch", "sh")):
                suffix = "s"
            if suffix == "s" and word.endswith(("ss", "us", "is")):
                break
            word = word[: -len(suffix)]
            break
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    return word


_stem_cached = lru_cache(maxsize=1 << 14)(_stem_word)

GENERIC_CUES = frozenset(_stem(word) for word in _GENERIC_CUE_WORDS)
FILLER = frozenset(_stem(word) for word in _FILLER_WORDS)

# Words that qualify a subject without naming one: adverbs of frequency, degree and contrast, and positions
# with no noun ("Always?", "Never ever?", "Instead?", "Still?", "First?" ask nothing specific, but each shares a
# word with some spec item: "seconds *always* have two digits", "*never* rounded up"). A question's subject
# leaves them out (``questions.question_subject``); what they qualify stays ("Should seconds always have two
# digits?" asks about seconds and digits). Unlike FILLER, the loop check and the reply rules still read them
# (a reply "Never." says something).
_QUALIFIER_WORDS = [
    "always",
    "never",
    "ever",
    "forever",
    "usually",
    "sometimes",
    "often",
    "typically",
    "normally",
    "mostly",
    "rarely",
    "seldom",
    "frequently",
    "rather",
    "instead",
    "otherwise",
    "regardless",
    "either",
    "neither",
    "whether",
    "anyway",
    "anyhow",
    "still",
    "even",
    "already",
    "yet",
    "now",
    "however",
    "though",
    "although",
    "therefore",
    "thus",
    "hence",
    "first",
    "last",
    "next",
    "previous",
    "part",
    "kind",
    # prepositions and conjunctions: "Between?", "Without?", "After?" relate subjects, name none
    "between",
    "without",
    "within",
    "after",
    "because",
    "inside",
    "around",
    "while",
    "together",
    "entirely",
    "whatever",
    "whichever",
    "itself",
    "unless",
    "until",
    "elsewhere",
    "anywhere",
    "everywhere",
    "somewhere",
    "except",
    "nor",
    "per",
    "toward",
    "towards",
    "alone",
    "several",
    "equally",
    "far",
    "including",
    "via",
    "upon",
    "among",
    "across",
    "through",
    "throughout",
    # round twenty: the prepositions and degree words the list above left out still drew a detail alone ("Above?"
    # told "A for 90 and above", "Below?" "below absolute zero raises", "Least?" "at least one digit")
    "above",
    "below",
    "beneath",
    "underneath",
    "beyond",
    "outside",
    "past",
    "earlier",
    "later",
    "less",
    "fewer",
    "least",
    # round thirty: words of how much, with no noun ("Is that the whole thing?" told "the last whole word" on 7 tasks,
    # "Is that the full task?" "full stops"); what they measure stays ("Whole seconds?", "Are full stops words?")
    "whole",
    "full",
    "entire",
    "complete",
    # and the conversation's own nouns, which name what was asked, not what it asks for ("Is that the entire
    # request?" told "the requested size"); "What is the requested size?" still asks about the size
    "request",
    "task",
    "prompt",
]
_IRREGULAR_FORMS = """
    gave given got gotten getting made kept wrote written told knew known lets letting
    become becomes becoming became go goes going went gone come comes coming came
    stay stays staying stayed take takes taking took taken
"""
# The other forms of the stopwords a request is framed with ("write", "give", "make", "use", "keep"...): the
# stopword list holds the plain form, but "Gives?", "Written?", "Uses?", "Kept?" name no more of a subject.
_STOPWORD_FORMS = [
    *(
        form
        for verb in ("give", "make", "use", "keep", "tell", "know", "want", "need", "get", "write", "implement")
        for form in (
            verb + "s",
            *((verb + "d", verb[:-1] + "ing") if verb.endswith("e") else (verb + "ed", verb + "ing")),
        )
    ),
    # the irregular forms, and the light verbs that say what becomes of a subject without naming one ("Becomes?")
    *_IRREGULAR_FORMS.split(),
]
_UNITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
_TEENS = ["ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
#: The words a question is framed with whatever it asks, beside the stopwords "input", "output" and "return": what
#: goes in ("argument", "parameter", "number"), what comes out ("result"), what is done with it ("produce", "handle").
#: The loop check reads them as stopwords (the first of its synonym groups). Alone they name no subject either (round
#: thirty-one: "What should the result be?" told "the result is a list of tuples" on 10 bundled tasks where "What
#: should the output be?" asked nothing, "Numbers?" a detail on 17; ``questions.question_subject``); beside another
#: word they say what it is of ("What type is the result?", "How long is a card number?").
FRAMING_WORDS = (
    "input argument argu arg param parameter result number numb amount produc yield emit handl treat deal process cop"
)
QUALIFIERS = frozenset(_stem(word) for word in (*_QUALIFIER_WORDS, *_STOPWORD_FORMS))
FRAMING = frozenset(_stem(word) for word in FRAMING_WORDS.split())
#: Words of how many ("one", "two", "single", "double", "thousand"): a spec item counts its nouns with them ("durations
#: of one hour", "a single hyphen", "double quotes"), so alone they name no subject ("One?", "Two?", "Is a one-liner
#: fine?" told "durations of one hour" on 13 bundled tasks, round thirty-one). Unlike QUALIFIERS they stay beside a
#: noun, to tell which item it is ("What about zero people?" is the item of zero people, not another of people), but
#: a spec item sharing only them with a question is no match (``questions.best_spec_match``). A number in digits
#: is a value, not one of these ("Is 0 valid?").
COUNT_WORDS = frozenset(
    _stem(word)
    for word in (
        *_UNITS,
        *_TEENS,
        *_TENS,
        *("single", "double", "triple", "twice", "thrice", "multiple", "dozen", "hundred", "thousand", "million"),
        *("billion", "trillion"),
    )
)


def content_words(text: str) -> set[str]:
    return {_stem(w) for w in _WORD.findall(fold(text).lower()) if w.isascii() and w not in STOPWORDS and len(w) > 1}


# --- concepts: what a reply says, for judging which hidden detail it states ---------------------------------

# A token that names something exactly: it has a digit, an underscore, an inner ":" "." "/" "+" "-", or a
# capital after its first letter ("ValueError", "KiB", "NASA", "H:MM:SS", "1.5", "YYYY-MM-DD"). Such tokens
# survive a paraphrase (a user who says "throw a ValueError" has said "raises ValueError"). Each separator
# must be followed by a word character, so the pattern never backtracks.
_TOKEN = re.compile(r"[A-Za-z0-9_]+(?:[:./+-][A-Za-z0-9_]+)*")


def key_tokens(text: str) -> set[str]:
    """The exact tokens of ``text`` (see ``_TOKEN``, after :func:`fold`), lower-cased."""
    found = set()
    for token in _TOKEN.findall(fold(text)):
        if len(token) > MAX_CACHED_WORD:
            continue  # no real identifier or number is that long: a hostile run, not a name
        if not any(c.isalnum() for c in token):
            continue  # "_" or "__" (a shrug's arm, a divider) names nothing
        if any(c.isdigit() or c in "_:./+-" for c in token) or any(c.isupper() for c in token[1:]):
            found.add(token.lower())
    return found


# Words a user may use for the same idea, mapped to one concept (after stemming). Deliberately small: only
# paraphrases common enough in requirements that matching them matters ("throw" for "raise", "floor" for
# "truncate"); anything else is covered by word prefixes (``CONCEPT_PREFIX``) and exact tokens.
_SYNONYM_GROUPS = """
    rais throw throws thrown
    error exception valueerror typeerror keyerror indexerror
    truncat floor chop chopp round_down
    negativ minus below_zero less_zero below_0 less_0
    pad padd lead_zero lead_0
    lowercas lower_cas
    uppercas upper_cas capital capitaliz
    empty blank
    duplicat repeat repeated dupe
    ignor skip skipp
    hyphen dash
    whitespac spac
    fraction fractional decimal
    integer int whole
    none null nil
    invalid illegal malformed bad wrong
    maximum max most limit cap
    minimum min least
""".strip().splitlines()
SYNONYMS = {word: group.split()[0] for group in _SYNONYM_GROUPS for word in group.split()}
#: Concepts are compared on their first letters, so "fractional" meets "fractions" and "truncation"
#: meets "truncated" where the suffix stripper leaves them apart.
CONCEPT_PREFIX = 6


def concept(word: str) -> str:
    """One word's concept: its synonym group, else the first CONCEPT_PREFIX letters of its stem."""
    stem = _stem(word)
    return SYNONYMS.get(stem) or SYNONYMS.get(word) or stem[:CONCEPT_PREFIX]


def concepts(text: str) -> set[str]:
    """What ``text`` talks about (after :func:`fold`): the concepts of its content words and its exact tokens."""
    text = fold(text)
    words = [w for w in _WORD.findall(text.lower()) if w.isascii() and w not in STOPWORDS and len(w) > 1]
    found = {concept(w) for w in words}
    # two-word phrases a synonym group names ("below zero", "rounded down", "leading zeros")
    found.update(SYNONYMS[pair] for pair in _phrases([_stem(w) for w in words]))
    return found | key_tokens(text)


def _phrases(stems: list[str]) -> set[str]:
    """The synonym groups' two-word phrases among consecutive ``stems``, as "first_second"."""
    return {pair for pair in map("_".join, pairwise(stems)) if pair in SYNONYMS}


def phrase_reading(text: str) -> tuple[set[str], set[str]]:
    """(the concepts two consecutive content words of ``text`` name together, the stems of the words making up
    those phrases): a synonym group's two-word phrases ("below zero" and "less than zero" are "negative", "rounded
    down" "truncate", "leading zeros" "pad"), which the words alone ("zero", "down") do not name. A number is a word
    here however short: "below 0" is "below zero"."""
    return read_words(text)[1:]


def read_words(text: str) -> tuple[set[str], set[str], set[str]]:
    """(:func:`content_words` of ``text``, then :func:`phrase_reading` of it) in one pass over its words."""
    stems = [
        _stem(w)
        for w in _WORD.findall(fold(text).lower())
        if w.isascii() and w not in STOPWORDS and (len(w) > 1 or w.isdigit())
    ]
    pairs = _phrases(stems)
    content = set(stems).difference(_DIGITS)  # content words have two letters or more
    return content, {SYNONYMS[pair] for pair in pairs}, {word for pair in pairs for word in pair.split("_")}


_DIGITS = frozenset("0123456789")


#: ``SYNONYMS`` where a question is matched to a detail (the loop check and the simulators): exception names are
#: choices, not synonyms: "raise ValueError?" and "raise TypeError?" ask different things, and "raise an error?" asks
#: whether anything is raised, not about the detail naming the one exception ("Should a negative amount raise an
#: error?" asks about negative amounts, not about the detail "any other currency raises ValueError").
QUESTION_SYNONYMS = {w: head for w, head in SYNONYMS.items() if not (w.endswith("error") and w != head)}


def matching_words(words: set[str] | frozenset[str]) -> frozenset[str]:
    """Stemmed ``words`` as a question is matched to a detail: each word its synonym group's name
    (:data:`QUESTION_SYNONYMS`: "throw" is "raise", "exception" "error", "illegal" "invalid"), in place of the word
    (one word, one weight: a word and its group's name both counted would weigh it twice)."""
    return frozenset(QUESTION_SYNONYMS.get(word, word) for word in words)


# --- the same question reworded: what the loop check reads a word as ----------------------------------------

#: Digits and symbols read as the letters they stand for inside a word ("r3turn", "n€g@tive", "5h0uld"): one
#: letter each, so tokens that differ in a number stay apart ("x1"/"x2"; only 6 and 8 both read "b").
LEET = {"0": "o", "1": "i", "2": "z", "3": "e", "4": "a", "5": "s", "6": "b", "7": "t", "8": "b", "9": "g"}
LEET |= {"@": "a", "$": "s", "\u20ac": "e", "\u00a3": "l", "|": "l", "!": "i"}
_LEET_TABLE = str.maketrans(LEET)
# A run of letters, digits and leet symbols (lower case: the loop check reads normalised text). One character
# class repeated: it cannot backtrack.
_LEET_TOKEN = re.compile("[a-z0-9" + re.escape("".join(c for c in LEET if not c.isdigit())) + "]+")


# Synonyms a question is reworded with, for the loop check only (the reply rules keep ``SYNONYMS``): a group
# is one concept, its first word the name. Words a question is framed with whatever it asks ("argument" for
# "input", "result" for "output", "treat" for "handle", itself filler) are in the first group, read as stopwords.
_LOOP_SYNONYM_GROUPS = f"""
    {FRAMING_WORDS}
    allow accept permit support
    reject refus disallow forbid prohibit
    remov delet strip eras
    ignor disregard omit
    sort order arrang
    string str text
    list array sequenc
    length size len
    start begin
    end finish
    larg big huge
    small tiny littl
    second sec
    hour hr
""".strip().splitlines()
LOOP_SYNONYMS = dict(QUESTION_SYNONYMS)
LOOP_SYNONYMS |= {word: group.split()[0] for group in _LOOP_SYNONYM_GROUPS for word in group.split()}
#: What the loop check drops from a turn's words: stopwords, filler (by definition it names no subject), and
#: the question-framing group above.
LOOP_STOPWORDS = STOPWORDS | FILLER | {"input"}
# Where the digit "1" and the symbol "|" stand for "l" or for "i" alike, a key reads both letters as "i".
_L_AS_I = str.maketrans("l", "i")
_LOOP_SYNONYMS_I = {word.translate(_L_AS_I): head.translate(_L_AS_I) for word, head in LOOP_SYNONYMS.items()}
# (a stopword's other forms too, "gives" beside "give": the loop check compares stems)
_LOOP_STOPWORDS_I = frozenset(
    form.translate(_L_AS_I)
    for word in (*LOOP_STOPWORDS, *(w for w, head in LOOP_SYNONYMS.items() if head == "input"))
    for form in (word, _stem(word))
)
#: Numbers this long or shorter that read as a stopword ("1" is "I", "15" "is") are that stopword to the loop
#: check: in leetspeak they are, and the characters of the turn still tell "1 second" from "4 seconds".
SHORT_NUMBER = 2


def read_leet(text: str) -> str:
    """Normalised ``text`` with each word written in digits and symbols read as letters (``LEET``: "r3turn
    n3g@tive" -> "return negative", "1$" -> "is"). A number (digits alone: "15", "0:01") is left alone; a
    trailing "!" or "|" is punctuation. A number with a unit reads as letters too ("100ms" -> "ioom s"): both
    sides of a comparison are read alike, and different digits read as different letters, so different values
    stay apart. Linear: one regex pass that cannot backtrack, one translation per token."""
    if not any(char in LEET for char in text):
        return text
    return _LEET_TOKEN.sub(_read_leet_token, text)


def _read_leet_token(match: re.Match[str]) -> str:
    token = match[0]
    core = token.rstrip("!|")
    if core.isalpha() or core.isdigit() or not core:
        return token
    return core.translate(_LEET_TABLE) + token[len(core) :]


# --- numbers written as words: the loop check reads "three" as "3" --------------------------------------------

#: The value of each number word (lower case, as the loop check reads normalised text): units, teens, tens.
NUMBER_WORDS = {
    **{word: value for value, word in enumerate(_UNITS)},
    **{word: 10 + value for value, word in enumerate(_TEENS)},
    **{word: 20 + 10 * value for value, word in enumerate(_TENS)},
    "fourty": 40,
}
_HUNDRED = "hundred"
_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
_NUMBER_PARTS = frozenset((*NUMBER_WORDS, _HUNDRED, *_SCALES))
# A text's runs of letters and the runs of anything else between them (one character class each: no backtracking).
_LETTERS_OR_NOT = re.compile("[a-z]+|[^a-z]+")
#: What may stand between two number words of one number ("twenty-one", "one hundred and five").
_JOINS = frozenset((" ", "-", " - "))


def read_number_words(text: str) -> str:
    """Normalised ``text`` with numbers written in words as digits ("three" -> "3", "twenty-one" -> "21", "three
    thousand six hundred" -> "3600", "one hundred and five" -> "105", "fifty-nine point nine" -> "59.9"): the same
    question asked with "three" where it said "3" is the same question. Words that make no one number stay
    numbers of their own ("one two" -> "1 2"); a number word spelt backwards ("eerht") is the number too, as
    the loop check reads words either way round. Linear: one regex pass that cannot backtrack, then one step per
    token."""
    return number_words(text)[0]


def number_words(text: str) -> tuple[str, frozenset[str]]:
    """(:func:`read_number_words` of ``text``, the numbers it read from words)."""
    tokens = _LETTERS_OR_NOT.findall(text)
    if not any(token in _NUMBER_PARTS or token in _BACKWARDS_NUMBERS for token in tokens):
        return text, frozenset()
    out: list[str] = []
    read: set[str] = set()
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token in NUMBER_WORDS:
            index = _read_number(tokens, index, out)
            read.add(out[-1])
        elif token in _BACKWARDS_NUMBERS:
            out.append(_BACKWARDS_NUMBERS[token])
            read.add(out[-1])
            index += 1
        else:
            out.append(token)
            index += 1
    return "".join(out), frozenset(read)


def _read_number(tokens: list[str], index: int, out: list[str]) -> int:
    """Read the number starting at ``tokens[index]`` (a number word) into ``out``; the index after it."""
    total, group, last = 0, NUMBER_WORDS[tokens[index]], tokens[index]
    end = index + 1  # the token after the number read so far
    while end + 1 < len(tokens) and tokens[end] in _JOINS:
        step, word = 2, tokens[end + 1]
        if word == "and":
            # "one hundred and five": "and" joins only after a hundred or a scale, before a units, teens or tens word
            if not (last == _HUNDRED or last in _SCALES) or end + 3 >= len(tokens) or tokens[end + 2] != " ":
                break
            step, word = 4, tokens[end + 3]
            if NUMBER_WORDS.get(word, 0) == 0:
                break
        value = NUMBER_WORDS.get(word)
        if value is not None and value > 0 and last not in NUMBER_WORDS:
            group += value  # after "hundred" or a scale: "one hundred five", "two thousand ten"
        elif value is not None and 0 < value < 10 and last in _TENS_WORDS:
            group += value  # "twenty one"
        elif word == _HUNDRED and last in NUMBER_WORDS and 0 < group < 100:
            group *= 100
        elif word in _SCALES and group and (not total or _SCALES[word] < _lowest_scale(total)):
            total, group = total + group * _SCALES[word], 0
        else:
            break
        last = word
        end += step
    number = str(total + group)
    # "fifty-nine point nine": a decimal part, each digit a units word
    if end + 2 < len(tokens) and tokens[end] == " " and tokens[end + 1] == "point":
        digits = []
        at = end + 2
        while at + 1 < len(tokens) and tokens[at] in _JOINS and tokens[at + 1] in _UNIT_VALUES:
            digits.append(_UNIT_VALUES[tokens[at + 1]])
            at += 2
        if digits:
            number += "." + "".join(digits)
            end = at
    out.append(number)
    return end


_TENS_WORDS = frozenset((*_TENS, "fourty"))
# Number words spelt backwards ("eerht"), each read alone; not "net", an English word of its own.
_BACKWARDS_NUMBERS = {word[::-1]: str(value) for word, value in NUMBER_WORDS.items() if word != "ten"}
_UNIT_VALUES = {word: str(value) for value, word in enumerate(_UNITS)}


def _lowest_scale(total: int) -> int:
    """The smallest scale already in ``total`` (a number built from scales: 3,600,000 has thousands)."""
    scale = 10**3
    while total % (scale * 10**3) == 0 and scale < 10**12:
        scale *= 10**3
    return scale


def loop_key(word: str) -> str | None:
    """What the loop check reads one word of a turn as (None for a word that asks nothing): its stem's concept
    (``LOOP_SYNONYMS``), "l" read as "i", and the same key for the word spelt backwards ("rorre" is "error"),
    so a question reworded with synonyms, in leetspeak or letter by letter backwards has the same keys."""
    backwards = word[::-1]
    if word in STOPWORDS or backwards in STOPWORDS:
        return None
    key, named = _loop_concept(word)
    other, other_named = _loop_concept(backwards)
    if key is None or other is None:
        return None
    forms: tuple[str, ...] = (word, backwards, _stem(word), _stem(backwards))
    if len(word) <= SHORT_NUMBER and word.isdigit():
        forms = (word.translate(_LEET_TABLE), backwards.translate(_LEET_TABLE))
    # A word a synonym group names is that concept, even where a form of it is filler ("repeated").
    if not (named or other_named) and any(form.translate(_L_AS_I) in _LOOP_STOPWORDS_I for form in forms):
        return None
    # The way round a synonym group names, else the smaller: the same pair of keys whichever way it is spelt.
    return key if named and not other_named else other if other_named and not named else min(key, other)


def _loop_concept(word: str) -> tuple[str | None, bool]:
    """(the word's concept, None for a framing word; whether a synonym group named it)."""
    stem = _stem(word).translate(_L_AS_I)
    head = _LOOP_SYNONYMS_I.get(stem) or _LOOP_SYNONYMS_I.get(word.translate(_L_AS_I))
    return (None if head == "input" else head or stem), head is not None


def loop_phrase(first: str, second: str) -> str | None:
    """The concept two consecutive words (neither a stopword) name together ("below zero" is "negative",
    "lower case" "lowercase"), in either order and either way round ("orez woleb", "woleb orez"), or None."""
    first_back, second_back = first[::-1], second[::-1]
    for one, two in ((first, second), (second, first), (second_back, first_back), (first_back, second_back)):
        head = _LOOP_SYNONYMS_I.get(f"{_stem(one)}_{_stem(two)}".translate(_L_AS_I))
        if head is not None:
            return head
    return None
