import { startDragonfly } from './dragonfly.ts';
const df = await startDragonfly({ managerOnly: process.argv[2] === 'manager' });
console.log(JSON.stringify({ managerURL: df.managerURL, dir: df.dir, seed: df.seedPeer?.proxyURL, peers: df.peers.map((p) => p.proxyURL) }));
process.on('SIGTERM', () => void df.stop().then(() => process.exit(0)));
process.on('SIGINT', () => void df.stop().then(() => process.exit(0)));
setInterval(() => {}, 1 << 30);
