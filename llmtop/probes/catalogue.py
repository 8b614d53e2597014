"""Which application a process belongs to: the catalogue as data, and the matcher.

A browser or an Electron app runs as a dozen helper processes; the probe panel shows it as one
application ("Chromium (14 processes)"), because that is what a user can close. The catalogue
is plain data (`CATALOGUE`, a tuple of `AppRule`), so adding an app never adds a branch.

Pattern syntax (one string per pattern, matched case-insensitively against the process name
as psutil reports it): ``"chrome"`` matches exactly, ``"Google Chrome*"`` matches a prefix.
Prefix rules survive the 15-character truncation of process names on Linux/macOS
("Isolated Web Co" is Firefox's "Isolated Web Content").

Names from all three systems are matched on every system: they do not collide, and a single
table is easier to test. Some names are generic (an Electron main process is "Electron" on
macOS, Chrome's and VS Code's crash handlers are both "chrome_crashpad_handler", vLLM runs as
"python3"); for those, `classify` looks at the executable path and the first command-line
element (`AppRule.paths`) and, for interpreters, at the arguments (`AppRule.args`), before
falling back to the name rule. The caller reads exe/cmdline only when `needs_path(name)` is
true, once per process lifetime, so the cost stays low.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class Category(StrEnum):
    """What kind of application a process group is; drives the verdict's wording and remedy."""

    BROWSER = "browser"
    CHAT = "chat/video call"
    IDE = "IDE/indexer"
    BUILD = "build/compiler"
    SYNC = "sync/backup/search indexer"
    INFERENCE = "other inference engine"
    ENGINE = "measured engine"
    SELF = "llmtop"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class AppRule:
    """One application: display name, category and how to recognise its processes.

    `linux`, `macos`, `windows`: name patterns (exact, or prefix when ending in ``*``).
    `paths`: lower-case substrings of the executable path or first cmdline element, used only
    for processes with a generic name (see `GENERIC_NAMES`).
    `args`: lower-case substrings of the rest of the command line, used only for interpreters
    (python, java, node; see `INTERPRETERS`), e.g. ``"vllm.entrypoints"``; their paths are
    never used.
    """

    app: str
    category: Category
    linux: tuple[str, ...] = ()
    macos: tuple[str, ...] = ()
    windows: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    args: tuple[str, ...] = ()

    @property
    def patterns(self) -> tuple[str, ...]:
        """All name patterns, Linux then macOS then Windows."""
        return self.linux + self.macos + self.windows


_BROWSER, _CHAT, _IDE, _BUILD, _SYNC, _INFER = (
    Category.BROWSER,
    Category.CHAT,
    Category.IDE,
    Category.BUILD,
    Category.SYNC,
    Category.INFERENCE,
)

# Order matters only for `paths`/`args` (the first rule whose substring matches wins), so
# specific paths come before general ones (Chromium before Chrome).
CATALOGUE: tuple[AppRule, ...] = (
    # --- browsers
    AppRule(
        "Chromium",
        _BROWSER,
        linux=("chromium", "chromium-browser", "chromium-bin"),
        macos=("Chromium*",),
        paths=("chromium",),
    ),
    AppRule(
        "Google Chrome",
        _BROWSER,
        linux=("chrome", "google-chrome*", "chrome_crashpad_handler", "chrome_crashpad"),
        macos=("Google Chrome*",),
        windows=("chrome.exe",),
        paths=("/google/chrome", "google chrome", "\\google\\chrome"),
    ),
    AppRule(
        "Firefox",
        _BROWSER,
        linux=(
            "firefox",
            "firefox-esr",
            "firefox-bin",
            "Web Content",
            "Isolated Web*",
            "Isolated Servic*",
            "RDD Process",
            "Socket Process",
            "Privileged Cont*",
            "WebExtensions",
            "Utility Process",
            "GPU Process",
            "Forked Child",
        ),
        macos=("Firefox*", "plugin-container"),
        windows=("firefox.exe",),
        paths=("firefox",),
    ),
    AppRule("Safari", _BROWSER, macos=("Safari*", "com.apple.WebKit*", "com.apple.Safari*")),
    AppRule(
        "Microsoft Edge",
        _BROWSER,
        linux=("msedge", "microsoft-edge*"),
        macos=("Microsoft Edge*",),
        windows=("msedge.exe", "msedgewebview2.exe"),
        paths=("msedge", "microsoft edge"),
    ),
    AppRule(
        "Brave",
        _BROWSER,
        linux=("brave", "brave-browser*"),
        macos=("Brave Browser*",),
        windows=("brave.exe",),
        paths=("brave",),
    ),
    AppRule(
        "Arc", _BROWSER, macos=("Arc", "Arc Helper*"), windows=("Arc.exe",), paths=("arc.app/",)
    ),
    AppRule(
        "Opera",
        _BROWSER,
        linux=("opera",),
        macos=("Opera*",),
        windows=("opera.exe",),
        paths=("/opera",),
    ),
    AppRule(
        "Vivaldi",
        _BROWSER,
        linux=("vivaldi", "vivaldi-bin"),
        macos=("Vivaldi*",),
        windows=("vivaldi.exe",),
        paths=("vivaldi",),
    ),
    # --- chat / video calls
    AppRule(
        "Slack",
        _CHAT,
        linux=("slack",),
        macos=("Slack*",),
        windows=("slack.exe",),
        paths=("/slack/", "slack.app/", "\\slack\\"),
    ),
    AppRule(
        "Discord",
        _CHAT,
        linux=("Discord", "discord"),
        macos=("Discord*",),
        windows=("Discord.exe",),
        paths=("discord",),
    ),
    AppRule(
        "Microsoft Teams",
        _CHAT,
        linux=("teams", "teams-for-linux"),
        macos=("Microsoft Teams*", "MSTeams"),
        windows=("ms-teams.exe", "Teams.exe"),
        paths=("teams",),
    ),
    AppRule(
        "Zoom",
        _CHAT,
        linux=("zoom", "ZoomWebviewHost", "zoom.real"),
        macos=("zoom.us", "Zoom*", "CptHost", "caphost"),
        windows=("Zoom.exe",),
        paths=("/zoom/", "zoom.us.app/"),
    ),
    AppRule(
        "Skype",
        _CHAT,
        linux=("skypeforlinux",),
        macos=("Skype*",),
        windows=("Skype.exe",),
        paths=("skype",),
    ),
    # --- IDEs and their indexers
    AppRule(
        "VS Code",
        _IDE,
        linux=("code", "code-insiders", "code-oss", "codium"),
        macos=("Code Helper*", "Code - Insiders Helper*"),
        windows=("Code.exe",),
        paths=(
            "/usr/share/code",
            "/snap/code/",
            "visual studio code",
            "/vscode",
            "\\microsoft vs code\\",
            "/code-oss",
            "/vscodium",
        ),
    ),
    AppRule(
        "JetBrains IDE",
        _IDE,
        linux=(
            "idea",
            "idea.sh",
            "pycharm*",
            "clion*",
            "goland*",
            "webstorm*",
            "phpstorm*",
            "rubymine*",
            "datagrip*",
            "rustrover*",
            "rider",
            "fsnotifier",
        ),
        windows=(
            "idea64.exe",
            "pycharm64.exe",
            "clion64.exe",
            "goland64.exe",
            "webstorm64.exe",
            "phpstorm64.exe",
            "rider64.exe",
            "rustrover64.exe",
        ),
        paths=("jetbrains", "intellij"),
        args=("com.intellij.idea.main", "jetbrains"),
    ),
    AppRule(
        "Xcode",
        _IDE,
        macos=(
            "Xcode",
            "SourceKitService",
            "sourcekit-lsp",
            "XCBBuildService",
            "IBAgent*",
            "com.apple.dt.*",
        ),
    ),
    # --- builds and compilers
    AppRule(
        "GCC",
        _BUILD,
        linux=(
            "gcc",
            "gcc-*",
            "g++",
            "g++-*",
            "cc",
            "c++",
            "cc1",
            "cc1plus",
            "cc1obj",
            "collect2",
            "lto1",
            "lto-wrapper",
            "as",
            "ld",
            "ld.bfd",
            "ld.gold",
        ),
        windows=("gcc.exe", "g++.exe", "cc1.exe", "cc1plus.exe"),
    ),
    AppRule("Clang", _BUILD, linux=("clang*", "ld.lld", "lld"), windows=("clang*",)),
    AppRule(
        "Rust (cargo/rustc)",
        _BUILD,
        linux=("rustc", "cargo", "rust-analyzer"),
        windows=("rustc.exe", "cargo.exe", "rust-analyzer.exe"),
    ),
    AppRule(
        "Go toolchain",
        _BUILD,
        linux=("go", "gopls"),
        windows=("go.exe", "gopls.exe"),
        paths=("/pkg/tool/",),
    ),
    AppRule(
        "Java build (javac/Gradle)",
        _BUILD,
        linux=("javac", "gradle", "mvn"),
        windows=("javac.exe", "gradle.exe"),
        args=("org.gradle.", "gradledaemon", "com.sun.tools.javac", "org.codehaus.plexus"),
    ),
    AppRule(
        "Make/Ninja/CMake",
        _BUILD,
        linux=("make", "gmake", "ninja", "cmake", "ctest"),
        windows=("make.exe", "ninja.exe", "cmake.exe", "MSBuild.exe", "cl.exe", "link.exe"),
    ),
    # --- sync, backup, search indexers
    AppRule(
        "Dropbox",
        _SYNC,
        linux=("dropbox",),
        macos=("Dropbox*",),
        windows=("Dropbox.exe",),
        paths=("dropbox",),
    ),
    AppRule(
        "OneDrive", _SYNC, linux=("onedrive",), macos=("OneDrive*",), windows=("OneDrive.exe",)
    ),
    AppRule(
        "Google Drive",
        _SYNC,
        linux=("google-drive-ocamlfuse",),
        macos=("Google Drive*",),
        windows=("GoogleDriveFS.exe",),
    ),
    AppRule(
        "Spotlight",
        _SYNC,
        macos=(
            "mds",
            "mds_stores",
            "mdworker*",
            "mdsync",
            "mdbulkimport",
            "corespotlightd",
            "Spotlight",
        ),
    ),
    AppRule("Time Machine", _SYNC, macos=("backupd", "backupd-helper")),
    AppRule(
        "GNOME Tracker",
        _SYNC,
        linux=("tracker-miner*", "tracker-extract*", "tracker-store", "localsearch*"),
    ),
    AppRule("KDE Baloo", _SYNC, linux=("baloo*",)),
    AppRule(
        "Windows Search",
        _SYNC,
        windows=("SearchIndexer.exe", "SearchProtocolHost.exe", "SearchFilterHost.exe"),
    ),
    AppRule(
        "Syncthing", _SYNC, linux=("syncthing",), macos=("syncthing",), windows=("syncthing.exe",)
    ),
    AppRule(
        "Nextcloud", _SYNC, linux=("nextcloud",), macos=("nextcloud",), windows=("nextcloud.exe",)
    ),
    # --- other inference engines
    AppRule(
        "Ollama",
        _INFER,
        linux=("ollama", "ollama_llama_server", "ollama_llama_se"),
        macos=("Ollama*",),
        windows=("ollama.exe", "ollama app.exe", "ollama_llama_server.exe"),
    ),
    AppRule(
        "llama.cpp",
        _INFER,
        linux=("llama-server", "llama-cli", "llama-bench"),
        windows=("llama-server.exe", "llama-cli.exe"),
    ),
    AppRule("vLLM", _INFER, linux=("vllm*",), args=("vllm.entrypoints", "vllm serve")),
    AppRule("llama-cpp-python", _INFER, args=("llama_cpp.server",)),
    # another llmtop's embedded engine: servers/child.py starts `python -m llmtop engine`, a
    # user `llmtop engine` (the console script, whose arguments follow its path)
    AppRule("llmtop engine", _INFER, args=("-m llmtop engine", "llmtop engine")),
    AppRule(
        "LM Studio",
        _INFER,
        linux=("lmstudio", "lm-studio", "lms"),
        macos=("LM Studio*",),
        windows=("LM Studio.exe", "lms.exe"),
        paths=("lm studio", "lm-studio", "lmstudio"),
    ),
)

# Names that many apps share: resolved by path/args first, by name only as a fallback.
GENERIC_NAMES: tuple[str, ...] = (
    "chrome",
    "chrome_crashpad_handler",
    "chrome_crashpad",
    "crashpad_handler",
    "Electron",
    "electron",
    "plugin-container",
    "python*",
    "java",
    "node",
    "compile",
    "llmtop",  # the console script: `llmtop engine` is an engine, any other llmtop is not
)

# Interpreters: their `args` say what program they run (vLLM, Gradle, a JetBrains IDE);
# llmtop's console script too, whose arguments say whether it is the engine.
INTERPRETERS: tuple[str, ...] = ("python*", "java", "node", "llmtop")


@dataclass(frozen=True, slots=True)
class _Index:
    exact: dict[str, AppRule]
    prefixes: tuple[tuple[str, AppRule], ...]  # longest prefix first


def _build_index(rules: Sequence[AppRule]) -> _Index:
    exact: dict[str, AppRule] = {}
    prefixes: list[tuple[str, AppRule]] = []
    for rule in rules:
        for pattern in rule.patterns:
            key = pattern.lower()
            if key.endswith("*"):
                prefixes.append((key[:-1], rule))
            else:
                exact.setdefault(key, rule)
    prefixes.sort(key=lambda item: -len(item[0]))
    return _Index(exact, tuple(prefixes))


def _matches(patterns: Sequence[str], name: str) -> bool:
    low = name.lower()
    for pattern in patterns:
        p = pattern.lower()
        if (p.endswith("*") and low.startswith(p[:-1])) or low == p:
            return True
    return False


_INDEX = _build_index(CATALOGUE)


def match_name(name: str) -> AppRule | None:
    """The rule whose name pattern matches `name` (exact first, then longest prefix), or None."""
    low = name.lower()
    rule = _INDEX.exact.get(low)
    if rule is not None:
        return rule
    for prefix, candidate in _INDEX.prefixes:
        if low.startswith(prefix):
            return candidate
    return None


def needs_path(name: str | None) -> bool:
    """True when `name` is generic, so `classify` wants the exe path and cmdline too."""
    return name is None or _matches(GENERIC_NAMES, name)


def classify(
    name: str | None,
    exe: str | None = None,
    cmdline: Sequence[str] | None = None,
) -> AppRule | None:
    """The catalogue entry for one process, or None when it is not in the catalogue.

    `name` is psutil's process name; `exe` and `cmdline` are consulted only when the name is
    generic (`needs_path`) and may be None/empty when unreadable (AccessDenied).
    """
    if name is not None and not needs_path(name):
        return match_name(name)
    if name is not None and _matches(INTERPRETERS, name):
        # An interpreter's path says nothing (~/Dropbox/x/.venv/bin/python is not Dropbox):
        # only its arguments name the program.
        rest = " ".join((cmdline or [])[1:]).lower()
        for rule in CATALOGUE:
            if rest and any(sub in rest for sub in rule.args):
                return rule
        return match_name(name)
    first = cmdline[0] if cmdline else ""
    locations = [s.lower() for s in (exe or "", first) if s]
    for rule in CATALOGUE:
        if any(sub in loc for sub in rule.paths for loc in locations):
            return rule
    return match_name(name) if name is not None else None
