# Man pages and shell completions from the built sonde itself (issue 28): one page per command,
# sonde(1) and sonde-<subcommand>(1) (nested ones too: sonde-config-show(1)), made from the text
# `sonde [SUBCOMMAND...] --help` prints, so the pages never drift from --help; and the scripts of
# `sonde completion bash|zsh|fish`. Run by the build (CMakeLists.txt, target sonde_docs):
#
#   cmake -DSONDE=path/to/sonde -DOUT=dir -DVERSION=0.1.0 -P cmake/man_pages.cmake
#
# Writes OUT/man1/*.1 and OUT/completions/{sonde,_sonde,sonde.fish}. The help text has CLI11's
# layout: a description line, "Usage: ...", then sections ("Options:", "Positionals:",
# "Subcommands:") of entries "  NAME    DESCRIPTION", a long NAME putting DESCRIPTION on the next,
# more indented line. Commands the parser hides (plugin-host) are not listed and get no page.

foreach(v SONDE OUT VERSION)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "man_pages.cmake: -D${v}=... is required")
  endif()
endforeach()

# CMake lists split on ';' and treat '[' ']' specially: the help text's own are swapped for
# characters it never holds and swapped back when written.
string(ASCII 1 SEMI)
string(ASCII 2 LBR)
string(ASCII 3 RBR)

# Text for roff: backslashes, dashes (options must be minus signs), a leading '.' or '\''.
function(roff_escape out text)
  string(REPLACE "\\" "\\e" text "${text}")
  string(REPLACE "-" "\\-" text "${text}")
  string(REPLACE "${SEMI}" ";" text "${text}")
  string(REPLACE "${LBR}" "[" text "${text}")
  string(REPLACE "${RBR}" "]" text "${text}")
  if(text MATCHES "^[.']")
    set(text "\\&${text}")
  endif()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# The page date: CMake's TIMESTAMP honours SOURCE_DATE_EPOCH (dpkg sets it from
# debian/changelog), so a package build is reproducible.
string(TIMESTAMP date "%Y-%m-%d" UTC)

# page(<word>...): the page of `sonde <word>... --help`, then those of its subcommands.
function(page)
  set(words ${ARGN})
  execute_process(COMMAND ${SONDE} ${words} --help
    OUTPUT_VARIABLE text ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR text STREQUAL "")
    message(FATAL_ERROR "man_pages.cmake: `sonde ${words} --help` failed (${rc}): ${err}")
  endif()
  string(REPLACE ";" "${SEMI}" text "${text}")
  string(REPLACE "[" "${LBR}" text "${text}")
  string(REPLACE "]" "${RBR}" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")

  list(JOIN words "-" suffix)
  if(suffix STREQUAL "")
    set(name sonde)
  else()
    set(name "sonde-${suffix}")
  endif()
  list(JOIN words " " command)
  string(STRIP "sonde ${command}" command)

  set(description "")
  set(usage "")
  set(section "")
  set(body "")
  set(subcommands "")
  set(entry_open FALSE)
  foreach(line IN LISTS lines)
    if(usage STREQUAL "" AND line MATCHES "^Usage: (.*)$")
      set(usage "${CMAKE_MATCH_1}")
      # CLI11 names the subcommand path (or nothing, for the top level); the page names sonde.
      if(NOT usage MATCHES "^sonde ")
        set(usage "sonde ${usage}")
      endif()
    elseif(usage STREQUAL "")
      string(STRIP "${line}" line)
      if(NOT line STREQUAL "")
        string(STRIP "${description} ${line}" description)
      endif()
    elseif(line MATCHES "^([A-Za-z][A-Za-z ]*):$")
      string(TOUPPER "${CMAKE_MATCH_1}" section)
      roff_escape(section "${section}")
      string(APPEND body ".SH ${section}\n")
      set(entry_open FALSE)
    elseif(line MATCHES "^  ([^ ].*)$")
      set(entry "${CMAKE_MATCH_1}")
      set(tag "${entry}")
      set(desc "")
      if(entry MATCHES "^(.*[^ ])   *([^ ].*)$")
        set(tag "${CMAKE_MATCH_1}")
        set(desc "${CMAKE_MATCH_2}")
      endif()
      if(section STREQUAL "SUBCOMMANDS")
        string(REGEX REPLACE " .*" "" sub "${tag}")
        list(APPEND subcommands "${sub}")
      endif()
      roff_escape(tag "${tag}")
      string(APPEND body ".TP\n.B ${tag}\n")
      if(NOT desc STREQUAL "")
        roff_escape(desc "${desc}")
        string(APPEND body "${desc}\n")
      endif()
      set(entry_open TRUE)
    elseif(entry_open AND line MATCHES "^   +([^ ].*)$")
      roff_escape(desc "${CMAKE_MATCH_1}")
      string(APPEND body "${desc}\n")
    elseif(line MATCHES "^[ ]*$")
      set(entry_open FALSE)
    else()
      string(STRIP "${line}" line)
      roff_escape(line "${line}")
      string(APPEND body ".PP\n${line}\n")
      set(entry_open FALSE)
    endif()
  endforeach()
  if(usage STREQUAL "")
    message(FATAL_ERROR "man_pages.cmake: `sonde ${words} --help` has no Usage line")
  endif()

  string(TOUPPER "${name}" title)
  roff_escape(title "${title}")
  roff_escape(ename "${name}")
  roff_escape(edesc "${description}")
  # NAME's text after the dash: the description without its own "sonde: " (the top level's).
  string(REGEX REPLACE "^sonde: " "" short "${description}")
  roff_escape(eshort "${short}")
  roff_escape(eusage "${usage}")
  roff_escape(ecommand "${command}")
  # SEE ALSO: the parent's page, then those of the subcommands.
  set(refs "")
  if(words)
    list(APPEND refs "sonde")
  endif()
  foreach(sub IN LISTS subcommands)
    list(APPEND refs "${name}-${sub}")
  endforeach()
  set(see "")
  foreach(ref IN LISTS refs)
    roff_escape(ref "${ref}")
    if(see STREQUAL "")
      set(see ".SH SEE ALSO\n")
    else()
      string(APPEND see ",\n")
    endif()
    string(APPEND see "\\fB${ref}\\fR(1)")
  endforeach()
  if(NOT see STREQUAL "")
    string(APPEND see "\n")
  endif()
  file(WRITE "${OUT}/man1/${name}.1"
    ".\\\" Generated by cmake/man_pages.cmake from `${command} --help`; do not edit.\n"
    ".TH ${title} 1 \"${date}\" \"sonde ${VERSION}\" \"User Commands\"\n"
    ".SH NAME\n${ename} \\- ${eshort}\n"
    ".SH SYNOPSIS\n.B ${eusage}\n"
    ".SH DESCRIPTION\n${edesc}\n"
    ".PP\nThis page is the text of\n.BR \"${ecommand} \\-\\-help\" .\n"
    "${body}${see}")
  foreach(sub IN LISTS subcommands)
    page(${words} ${sub})
  endforeach()
endfunction()

file(REMOVE_RECURSE "${OUT}/man1" "${OUT}/completions")
file(MAKE_DIRECTORY "${OUT}/man1" "${OUT}/completions")
page()

foreach(shell_file bash=sonde zsh=_sonde fish=sonde.fish)
  string(REGEX MATCH "^[a-z]+" shell "${shell_file}")
  string(REGEX REPLACE "^[a-z]+=" "" file "${shell_file}")
  execute_process(COMMAND ${SONDE} completion ${shell}
    OUTPUT_FILE "${OUT}/completions/${file}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "man_pages.cmake: `sonde completion ${shell}` failed (${rc})")
  endif()
endforeach()
file(WRITE "${OUT}/stamp" "")
