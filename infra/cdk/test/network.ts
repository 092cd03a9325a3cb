/**
 * What a Region stack's security groups let through, read from the synthesized template: every
 * rule (inline, or a separate AWS::EC2::SecurityGroupIngress/Egress) as data, and a `reaches`
 * that asks whether traffic from a source to a group on a port passes both the source's egress
 * (when the source is a group of the stack) and the target's ingress.
 */
import { Template } from 'aws-cdk-lib/assertions';

/** Where traffic comes from or goes to: a group (logical id, or an id like sg-… for imported ones), an IPv4 address, or a prefix list id. */
export type Peer = { sg: string } | { ip: string } | { prefixList: string };

export interface Rule {
  readonly group: string;
  readonly direction: 'ingress' | 'egress';
  readonly peer: Peer | { cidr: string };
  readonly from: number;
  readonly to: number;
  readonly protocol: string;
}

/** The logical id (or the literal id) a GroupId / SourceSecurityGroupId value names. */
function groupRef(v: any): string {
  if (typeof v === 'string') return v;
  if (v?.['Fn::GetAtt']) return v['Fn::GetAtt'][0];
  if (v?.Ref) return v.Ref;
  throw new Error(`unexpected group reference ${JSON.stringify(v)}`);
}

function peerOf(r: any, direction: 'ingress' | 'egress'): Rule['peer'] {
  const sg = direction === 'ingress' ? r.SourceSecurityGroupId : r.DestinationSecurityGroupId;
  if (sg !== undefined) return { sg: groupRef(sg) };
  const pl = direction === 'ingress' ? r.SourcePrefixListId : r.DestinationPrefixListId;
  if (pl !== undefined) return { prefixList: pl };
  if (r.CidrIp !== undefined) return { cidr: r.CidrIp };
  throw new Error(`rule with no peer: ${JSON.stringify(r)}`);
}

export function rules(t: Template): Rule[] {
  const out: Rule[] = [];
  const add = (group: string, direction: 'ingress' | 'egress', r: any) =>
    out.push({ group, direction, peer: peerOf(r, direction), from: r.FromPort, to: r.ToPort, protocol: String(r.IpProtocol) });
  for (const [id, g] of Object.entries(t.findResources('AWS::EC2::SecurityGroup')) as [string, any][]) {
    for (const r of g.Properties.SecurityGroupIngress ?? []) add(id, 'ingress', r);
    for (const r of g.Properties.SecurityGroupEgress ?? []) add(id, 'egress', r);
  }
  for (const r of Object.values(t.findResources('AWS::EC2::SecurityGroupIngress')) as any[]) {
    add(groupRef(r.Properties.GroupId), 'ingress', r.Properties);
  }
  for (const r of Object.values(t.findResources('AWS::EC2::SecurityGroupEgress')) as any[]) {
    add(groupRef(r.Properties.GroupId), 'egress', r.Properties);
  }
  return out;
}

function inCidr(ip: string, cidr: string): boolean {
  const num = (a: string) => a.split('.').reduce((n, o) => n * 256 + Number(o), 0);
  const [base, bits] = cidr.split('/');
  const size = 2 ** (32 - Number(bits));
  return Math.floor(num(ip) / size) === Math.floor(num(base) / size);
}

function matches(rulePeer: Rule['peer'], peer: Peer): boolean {
  if ('sg' in rulePeer) return 'sg' in peer && peer.sg === rulePeer.sg;
  if ('prefixList' in rulePeer) return 'prefixList' in peer && peer.prefixList === rulePeer.prefixList;
  if ('cidr' in rulePeer) return 'ip' in peer && inCidr(peer.ip, rulePeer.cidr);
  return false;
}

function allows(all: Rule[], group: string, direction: 'ingress' | 'egress', peer: Peer, port: number): boolean {
  return all.some((r) => r.group === group && r.direction === direction && r.protocol === 'tcp'
    && r.from <= port && port <= r.to && matches(r.peer, peer));
}

/**
 * Whether `source` reaches group `target` on TCP `port`. A source group of this stack must
 * also allow the traffic out; an address or a group from outside is checked on ingress only.
 */
export function reaches(t: Template, source: Peer, target: string, port: number): boolean {
  const all = rules(t);
  const ownGroups = new Set(Object.keys(t.findResources('AWS::EC2::SecurityGroup')));
  if ('sg' in source && ownGroups.has(source.sg) && !allows(all, source.sg, 'egress', { sg: target }, port)) return false;
  return allows(all, target, 'ingress', source, port);
}

/** The logical id of the group whose GroupDescription starts with `description`. */
export function groupId(t: Template, description: string): string {
  const found = Object.entries(t.findResources('AWS::EC2::SecurityGroup'))
    .filter(([, g]: [string, any]) => String(g.Properties.GroupDescription).startsWith(description));
  if (found.length !== 1) throw new Error(`expected one group described "${description}…", found ${found.length}`);
  return found[0][0];
}
