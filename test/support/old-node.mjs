// Preloaded with `node --import` to make the process look like an older Node.js (the engine check's test).
const node = process.env.PEERLOAD_FAKE_NODE_VERSION ?? '20.11.1';
Object.defineProperty(process, 'versions', { value: { ...process.versions, node } });
Object.defineProperty(process, 'version', { value: `v${node}` });
