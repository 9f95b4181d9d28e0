/**
 * Exports nothing imports, found with the TypeScript compiler's checker (a dev dependency already; ts-prune would add
 * a dependency tree for these few lines): every import and re-export of src/, test/, scripts/ and bench/ is resolved
 * to the exporting module and name, a re-export passing the use on to what it re-exports. What is left of a module
 * under the folders given is listed; a name used only inside its own module need not be exported.
 *
 *   node scripts/unused-exports.ts [folder...]     default: src; exit 1 when any is found
 */
import { resolve } from 'node:path';
import ts from 'typescript';
import { REPO_ROOT, sourceFiles } from './source-shape.ts';

export interface UnusedExport {
  file: string;
  name: string;
  /** A re-export (`export { x } from`, `export *`) rather than a declaration of the module's own. */
  reExport: boolean;
}

/** The exports of files under `folders` that no file of the repository imports. */
export function unusedExports(folders: readonly string[]): UnusedExport[] {
  const roots = ['src', 'test', 'scripts', 'bench'].flatMap((d) => sourceFiles(d));
  const program = ts.createProgram(
    roots.map((f) => resolve(REPO_ROOT, f)),
    {
      allowImportingTsExtensions: true,
      noEmit: true,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      target: ts.ScriptTarget.ESNext,
    },
  );
  const checker = program.getTypeChecker();
  const moduleOf = (sf: ts.SourceFile) => checker.getSymbolAtLocation(sf);
  const fileOf = (spec: ts.Expression | undefined) => {
    const mod = spec && checker.getSymbolAtLocation(spec);
    return mod?.valueDeclaration && ts.isSourceFile(mod.valueDeclaration) ? mod.valueDeclaration : undefined;
  };
  /** Module file and exported name, once marked. */
  const used = new Set<string>();
  const own = (sf: ts.SourceFile, e: ts.Symbol) =>
    (e.declarations ?? []).some((d) => d.getSourceFile() === sf && !ts.isExportSpecifier(d));
  const mark = (sf: ts.SourceFile | undefined, name: string) => {
    const mod = sf && moduleOf(sf);
    if (!sf || !mod || used.has(`${sf.fileName}|${name}`)) return;
    used.add(`${sf.fileName}|${name}`);
    const e = checker.tryGetMemberInModuleExports(name, mod);
    if (!e || own(sf, e)) return;
    if (e.flags & ts.SymbolFlags.Alias && e.declarations?.some((d) => d.getSourceFile() === sf)) {
      // `export { x } from`, `export { x }` of an import: the use passes on to what it names.
      const t = checker.getImmediateAliasedSymbol(e);
      const decl = t?.declarations?.[0];
      if (t && decl) mark(decl.getSourceFile(), t.name);
      return;
    }
    // Through `export * from`: each module it re-exports that has the name.
    for (const st of sf.statements)
      if (ts.isExportDeclaration(st) && !st.exportClause) {
        const target = fileOf(st.moduleSpecifier);
        const tm = target && moduleOf(target);
        if (tm && checker.tryGetMemberInModuleExports(name, tm)) mark(target, name);
      }
  };
  const markAll = (sf: ts.SourceFile | undefined) => {
    const mod = sf && moduleOf(sf);
    if (mod) for (const e of checker.getExportsOfModule(mod)) mark(sf, e.name);
  };
  for (const sf of program.getSourceFiles()) {
    if (sf.isDeclarationFile) continue;
    const visit = (node: ts.Node) => {
      if (ts.isImportDeclaration(node)) {
        const target = fileOf(node.moduleSpecifier);
        const bindings = node.importClause?.namedBindings;
        if (node.importClause?.name) mark(target, 'default');
        if (bindings && ts.isNamespaceImport(bindings)) markAll(target);
        else if (bindings)
          for (const el of bindings.elements) mark(target, (el.propertyName ?? el.name).text);
      } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
        markAll(fileOf(node.arguments[0]));
      }
      ts.forEachChild(node, visit);
    };
    visit(sf);
  }
  const out: UnusedExport[] = [];
  for (const file of folders.flatMap((d) => sourceFiles(d))) {
    const sf = program.getSourceFile(resolve(REPO_ROOT, file));
    const mod = sf && moduleOf(sf);
    if (!sf || !mod) continue;
    for (const e of checker.getExportsOfModule(mod))
      if (!used.has(`${sf.fileName}|${e.name}`)) out.push({ file, name: e.name, reExport: !own(sf, e) });
  }
  return out;
}

if (import.meta.main) {
  const found = unusedExports(process.argv.length > 2 ? process.argv.slice(2) : ['src']);
  for (const u of found) console.log(`${u.file}: ${u.name}${u.reExport ? ' (re-export)' : ''}`);
  process.exit(found.length > 0 ? 1 : 0);
}
