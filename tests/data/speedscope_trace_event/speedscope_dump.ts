// Print speedscope's own import of trace-event files as JSON (see SOURCES.md). Written for gpulens;
// it calls speedscope's importer (MIT, https://github.com/jlfwong/speedscope) and dumps each profile the
// way speedscope's src/lib/test-utils.ts dumpProfile does: stacks in time order (forEachCall), frames.
// Run from a speedscope checkout (commit 3613918de0dd55a263d0d04f85b0c8c2039c7bee) with esbuild:
//   npx esbuild speedscope_dump.ts --bundle --platform=node --outfile=dump.js
//   node dump.js sample/profiles/trace-event/*.json > speedscope-run.json
// Bare arrays are closed first as speedscope's permissive JSON parse does (trim, drop a trailing comma, add ']').
import * as fs from 'fs'
import * as path from 'path'
import {importTraceEvents} from './src/import/trace-event'
import {Profile, CallTreeNode} from './src/lib/profile'

function dump(profile: Profile): any {
  const stacks: [string, number][] = []
  let lastValue = 0
  const cur: string[] = []
  const emit = (v: number) => { if (v != lastValue) { stacks.push([cur.join(';'), v - lastValue]); lastValue = v } }
  profile.forEachCall((n: CallTreeNode, v: number) => { emit(v); cur.push(n.frame.name) },
                      (n: CallTreeNode, v: number) => { emit(v); cur.pop() })
  const frames: any[] = []
  profile.forEachFrame(f => frames.push({name: f.name, key: f.key, file: f.file ?? null, line: f.line ?? null,
                                         self: f.getSelfWeight(), total: f.getTotalWeight()}))
  return {name: profile.getName(), total: profile.getTotalWeight(), stacks, frames}
}

const out: any = {}
for (const file of process.argv.slice(2)) {
  let text = fs.readFileSync(file, 'utf8').trim()
  if (text[0] === '[') { text = text.replace(/,\s*$/, ''); if (text[text.length - 1] !== ']') text += ']' }
  const origWarn = console.warn; console.warn = () => {}
  try {
    const g = importTraceEvents(JSON.parse(text))
    out[path.basename(file)] = g.profiles.map(dump)
  } catch (e) { out[path.basename(file)] = {error: String(e)} }
  console.warn = origWarn
}
console.log(JSON.stringify(out, null, 1))
