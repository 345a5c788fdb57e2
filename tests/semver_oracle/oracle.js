// npm's semver as a test oracle for tests/test_semver.py: one process answers every batch.
// Reads one JSON request per line on stdin and writes one JSON answer per line on stdout:
//   {"op": "intersects" | "compare" | "satisfies" | "desugar" | "valid" | "matches", "cases": [[a, b], ...]}
//   -> {"results": [...]}, one per case: a boolean, -1/0/1, or a string (desugar), or
//      {"error": message} where semver throws.
//   {"op": "version"} -> {"version": "<semver package version>"}
'use strict'

const readline = require('node:readline')
const semver = require('semver')

const operations = {
  intersects: ([constraint, range]) => semver.intersects(constraint, range),
  compare: ([a, b]) => semver.compare(a, b),
  // semver.satisfies() answers false for an invalid version or range; the test wants the throw
  satisfies: ([version, range]) => new semver.Range(range).test(new semver.SemVer(version)),
  // the comparator sets node-semver tests: sets joined by ||, comparators by a space
  desugar: ([range]) => new semver.Range(range).range,
  // for tests/test_versions_extract.py: node's normal form (null when invalid), and
  // semver.satisfies as npm users call it (false, not a throw, on invalid input)
  valid: ([range]) => semver.validRange(range),
  matches: ([version, range]) => semver.satisfies(version, range),
}

const answer = (request) => {
  if (request.op === 'version') {
    return { version: require('semver/package.json').version }
  }
  const operation = operations[request.op]
  if (operation === undefined) {
    return { error: `unknown op ${request.op}` }
  }
  return {
    results: request.cases.map((args) => {
      try {
        return operation(args)
      } catch (error) {
        return { error: String(error.message) }
      }
    }),
  }
}

readline.createInterface({ input: process.stdin, terminal: false }).on('line', (line) => {
  let reply
  try {
    reply = answer(JSON.parse(line))
  } catch (error) {
    reply = { error: String(error.message) }
  }
  process.stdout.write(JSON.stringify(reply) + '\n')
})
