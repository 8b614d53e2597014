"""The application catalogue: names from Linux, macOS and Windows map to the right app."""

from __future__ import annotations

import pytest

from llmtop.probes.catalogue import CATALOGUE, Category, classify, match_name, needs_path

# (process name, exe, cmdline, expected app, expected category)
CASES = [
    # Chrome / Chromium on all three systems
    (
        "chrome",
        "/opt/google/chrome/chrome",
        ["/opt/google/chrome/chrome"],
        "Google Chrome",
        Category.BROWSER,
    ),
    ("chromium", None, None, "Chromium", Category.BROWSER),
    ("chromium-browser", None, None, "Chromium", Category.BROWSER),
    ("Google Chrome Helper (Renderer)", None, None, "Google Chrome", Category.BROWSER),
    ("Google Chrome H", None, None, "Google Chrome", Category.BROWSER),  # truncated to 15
    ("chrome.exe", None, None, "Google Chrome", Category.BROWSER),
    ("CHROME.EXE", None, None, "Google Chrome", Category.BROWSER),
    ("chrome_crashpad_handler", None, None, "Google Chrome", Category.BROWSER),
    # Firefox, including its Linux content processes (names truncated to 15 characters)
    ("firefox", None, None, "Firefox", Category.BROWSER),
    ("firefox-esr", None, None, "Firefox", Category.BROWSER),
    ("Web Content", None, None, "Firefox", Category.BROWSER),
    ("Isolated Web Co", None, None, "Firefox", Category.BROWSER),
    ("RDD Process", None, None, "Firefox", Category.BROWSER),
    ("firefox.exe", None, None, "Firefox", Category.BROWSER),
    # other browsers
    ("Safari", None, None, "Safari", Category.BROWSER),
    ("com.apple.WebKit.WebContent", None, None, "Safari", Category.BROWSER),
    ("msedge", None, None, "Microsoft Edge", Category.BROWSER),
    ("Microsoft Edge Helper (GPU)", None, None, "Microsoft Edge", Category.BROWSER),
    ("msedge.exe", None, None, "Microsoft Edge", Category.BROWSER),
    ("brave", None, None, "Brave", Category.BROWSER),
    ("Brave Browser Helper", None, None, "Brave", Category.BROWSER),
    ("Arc Helper (Renderer)", None, None, "Arc", Category.BROWSER),
    ("opera.exe", None, None, "Opera", Category.BROWSER),
    ("vivaldi-bin", None, None, "Vivaldi", Category.BROWSER),
    # chat / video calls
    ("slack", None, None, "Slack", Category.CHAT),
    ("Slack Helper (Renderer)", None, None, "Slack", Category.CHAT),
    ("Discord.exe", None, None, "Discord", Category.CHAT),
    ("ms-teams.exe", None, None, "Microsoft Teams", Category.CHAT),
    ("zoom.us", None, None, "Zoom", Category.CHAT),
    ("skypeforlinux", None, None, "Skype", Category.CHAT),
    # IDEs
    ("code", None, None, "VS Code", Category.IDE),
    ("Code Helper (Plugin)", None, None, "VS Code", Category.IDE),
    ("Code.exe", None, None, "VS Code", Category.IDE),
    ("pycharm", None, None, "JetBrains IDE", Category.IDE),
    ("idea64.exe", None, None, "JetBrains IDE", Category.IDE),
    ("Xcode", None, None, "Xcode", Category.IDE),
    # builds
    ("cc1plus", None, None, "GCC", Category.BUILD),
    ("cc1", None, None, "GCC", Category.BUILD),
    ("gcc-13", None, None, "GCC", Category.BUILD),
    ("clang++", None, None, "Clang", Category.BUILD),
    ("rustc", None, None, "Rust (cargo/rustc)", Category.BUILD),
    ("cargo.exe", None, None, "Rust (cargo/rustc)", Category.BUILD),
    ("go", None, None, "Go toolchain", Category.BUILD),
    ("javac", None, None, "Java build (javac/Gradle)", Category.BUILD),
    ("ninja", None, None, "Make/Ninja/CMake", Category.BUILD),
    ("make", None, None, "Make/Ninja/CMake", Category.BUILD),
    ("cmake", None, None, "Make/Ninja/CMake", Category.BUILD),
    # sync, backup, indexers
    ("Dropbox", None, None, "Dropbox", Category.SYNC),
    ("OneDrive.exe", None, None, "OneDrive", Category.SYNC),
    ("Google Drive", None, None, "Google Drive", Category.SYNC),
    ("mds_stores", None, None, "Spotlight", Category.SYNC),
    ("mdworker_shared", None, None, "Spotlight", Category.SYNC),
    ("tracker-miner-fs-3", None, None, "GNOME Tracker", Category.SYNC),
    ("baloo_file_extractor", None, None, "KDE Baloo", Category.SYNC),
    ("backupd", None, None, "Time Machine", Category.SYNC),
    # other inference engines
    ("ollama", None, None, "Ollama", Category.INFERENCE),
    ("ollama_llama_server", None, None, "Ollama", Category.INFERENCE),
    ("llama-server", None, None, "llama.cpp", Category.INFERENCE),
    ("VLLM::EngineCor", None, None, "vLLM", Category.INFERENCE),
    ("LM Studio Helper", None, None, "LM Studio", Category.INFERENCE),
    ("lmstudio", None, None, "LM Studio", Category.INFERENCE),
    # generic names resolved by path or arguments
    (
        "chrome",
        "/snap/chromium/2890/usr/lib/chromium-browser/chrome",
        None,
        "Chromium",
        Category.BROWSER,
    ),
    (
        "chrome_crashpad_handler",
        "/usr/share/code/chrome_crashpad_handler",
        None,
        "VS Code",
        Category.IDE,
    ),
    (
        "Electron",
        "/Applications/Visual Studio Code.app/Contents/MacOS/Electron",
        None,
        "VS Code",
        Category.IDE,
    ),
    (
        "python3",
        "/usr/bin/python3.11",
        ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "x"],
        "vLLM",
        Category.INFERENCE,
    ),
    (
        "java",
        "/usr/lib/jvm/java-17/bin/java",
        ["java", "-cp", "x.jar", "org.gradle.launcher.daemon.bootstrap.GradleDaemon"],
        "Java build (javac/Gradle)",
        Category.BUILD,
    ),
    (
        "java",
        None,
        ["/opt/idea/jbr/bin/java", "com.intellij.idea.Main"],
        "JetBrains IDE",
        Category.IDE,
    ),
    (
        "plugin-container",
        "/Applications/Firefox.app/Contents/MacOS/plugin-container.app/x",
        None,
        "Firefox",
        Category.BROWSER,
    ),
]


@pytest.mark.parametrize(("name", "exe", "cmdline", "app", "category"), CASES)
def test_classify_known_names(
    name: str, exe: str | None, cmdline: list[str] | None, app: str, category: Category
) -> None:
    rule = classify(name, exe, cmdline)
    assert rule is not None, name
    assert (rule.app, rule.category) == (app, category)


@pytest.mark.parametrize(
    ("name", "exe", "cmdline"),
    [
        ("bash", "/usr/bin/bash", ["bash"]),
        ("sleep", None, None),
        ("python3", "/usr/bin/python3.11", ["python3", "/home/u/code/train.py"]),
        ("node", "/usr/bin/node", ["node", "server.js"]),
        # a venv inside a synced folder is not the sync app
        ("python3", "/home/u/Dropbox/p/.venv/bin/python3", ["/home/u/Dropbox/p/.venv/bin/python3"]),
        (None, None, None),
    ],
)
def test_unknown_processes_are_not_catalogued(
    name: str | None, exe: str | None, cmdline: list[str] | None
) -> None:
    assert classify(name, exe, cmdline) is None


def test_generic_name_without_readable_path_falls_back_to_name_rule() -> None:
    # AccessDenied on exe/cmdline: the crash handler is still counted with Chrome.
    rule = classify("chrome_crashpad_handler", None, None)
    assert rule is not None and rule.app == "Google Chrome"


def test_needs_path_only_for_generic_names() -> None:
    assert needs_path("chrome_crashpad_handler")
    assert needs_path("python3.11")
    assert needs_path(None)
    assert not needs_path("firefox")
    assert not needs_path("Google Chrome Helper (Renderer)")


def test_exact_beats_prefix_and_longest_prefix_wins() -> None:
    assert match_name("Code Helper (Renderer)").app == "VS Code"  # type: ignore[union-attr]
    assert match_name("Code - Insiders Helper").app == "VS Code"  # type: ignore[union-attr]
    assert match_name("mdworker") is not None


def test_no_exact_pattern_belongs_to_two_apps() -> None:
    owners: dict[str, str] = {}
    clashes = []
    for rule in CATALOGUE:
        for pattern in rule.patterns:
            key = pattern.lower()
            if key in owners and owners[key] != rule.app:
                clashes.append((key, owners[key], rule.app))
            owners.setdefault(key, rule.app)
    assert clashes == []


def test_catalogue_covers_every_external_category() -> None:
    used = {rule.category for rule in CATALOGUE}
    assert used == set(Category) - {Category.ENGINE, Category.SELF, Category.OTHER}
    assert all(rule.patterns or rule.args for rule in CATALOGUE)
