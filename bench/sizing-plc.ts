/**
 * The PLCs of `bench:sizing` (bench/README.md, "Sizing"): Modbus TCP devices (modbus-serial's ServerTCP, one port
 * each) whose values change at a set rate, run as a child process of the bench so that serving them does not
 * share the bench's event loop. Each tag changes `changesPerTagPerS` times a second, at its own phase, so the
 * changes of a device spread evenly over time rather than landing all in one poll.
 *
 * A device's tags (`deviceTags`), by index: 4 in 10 float32 (a process value drifting on a sine), 2 int16 and 1
 * uint32 (counters), 3 bools in coils (toggling): floats, integers and booleans as a plant has them.
 *
 *   node dist/bench/sizing-plc.js <devices> <tagsPerDevice> <changesPerTagPerS>   # prints {"ports":[...]} as IPC
 */
import { pathToFileURL } from 'node:url';
import modbusSerial from 'modbus-serial';
import { freePort } from '../test/helpers/ports.js';

export interface PlcTag {
  readonly name: string;
  readonly table: 'holding' | 'coil';
  readonly address: number;
  readonly datatype: 'float32' | 'int16' | 'uint32' | 'bool';
}

/** The tags of one device: holding registers from 0 (floats and integers) and coils from 0 (bools). */
export function deviceTags(count: number): PlcTag[] {
  const tags: PlcTag[] = [];
  let register = 0;
  let coil = 0;
  for (let i = 0; i < count; i++) {
    const kind = i % 10;
    const datatype = kind < 4 ? 'float32' : kind < 6 ? 'int16' : kind < 7 ? 'uint32' : 'bool';
    if (datatype === 'bool') {
      tags.push({ name: `t${i}`, table: 'coil', address: coil++, datatype });
    } else {
      tags.push({ name: `t${i}`, table: 'holding', address: register, datatype });
      register += datatype === 'int16' ? 1 : 2;
    }
  }
  return tags;
}

/** How often tag `index` has changed by `nowS`: its own phase (golden-ratio spread) keeps the changes even. */
const changeCount = (index: number, nowS: number, perS: number): number =>
  Math.floor(nowS * perS + ((index * 0.618_034) % 1));

const registerCount = (tags: readonly PlcTag[]): number =>
  tags.reduce((n, t) => (t.table !== 'holding' ? n : n + (t.datatype === 'int16' ? 1 : 2)), 0);

/** The register words of every holding tag at `nowS`, indexed by address. */
function registers(tags: readonly PlcTag[], device: number, nowS: number, perS: number): Uint16Array {
  const words = new Uint16Array(registerCount(tags));
  const scratch = Buffer.alloc(4);
  tags.forEach((t, i) => {
    if (t.table !== 'holding') return;
    const k = changeCount(i, nowS, perS);
    if (t.datatype === 'int16') {
      words[t.address] = (k * 3 + i + device) & 0x7fff;
      return;
    }
    if (t.datatype === 'float32') scratch.writeFloatBE(50 + 20 * Math.sin(k * 0.05 + i) + ((k * 7919) % 100) / 1000);
    else scratch.writeUInt32BE((k * 1000 + i + device) >>> 0);
    words[t.address] = scratch.readUInt16BE(0);
    words[t.address + 1] = scratch.readUInt16BE(2);
  });
  return words;
}

async function serve(devices: number, tagsPerDevice: number, perS: number): Promise<void> {
  const { ServerTCP } = modbusSerial as unknown as { ServerTCP: new (vector: object, options: object) => object };
  const tags = deviceTags(tagsPerDevice);
  const coilTag = tags.filter((t) => t.table === 'coil').map((t) => tags.indexOf(t));
  const ports: number[] = [];
  for (let device = 0; device < devices; device++) {
    const vector = {
      getMultipleHoldingRegisters: (addr: number, length: number) =>
        Array.from(registers(tags, device, Date.now() / 1000, perS).subarray(addr, addr + length)),
      getHoldingRegister: (addr: number) => registers(tags, device, Date.now() / 1000, perS)[addr],
      getCoil: (addr: number) => changeCount(coilTag[addr], Date.now() / 1000, perS) % 2 === 1,
    };
    const port = await freePort();
    const server = new ServerTCP(vector, { host: '127.0.0.1', port, unitID: 1 }) as NodeJS.EventEmitter;
    await new Promise<void>((resolve, reject) => {
      server.once('initialized', () => resolve());
      server.once('serverError', reject);
    });
    ports.push(port);
  }
  process.send?.({ ports });
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [devices, tagsPerDevice, perS] = process.argv.slice(2).map(Number);
  void serve(devices, tagsPerDevice, perS);
}
